# Beta-VAE with an MSE reconstruction on 2-D manifold data; latent means gathered with numpy.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Encoder(nn.Module):
    def __init__(self, d_in=10, d_lat=2):
        super().__init__()
        self.hidden = nn.Linear(d_in, 32)
        self.mu = nn.Linear(32, d_lat)
        self.logvar = nn.Linear(32, d_lat)

    def forward(self, x):
        h = F.gelu(self.hidden(x))
        return self.mu(h), self.logvar(h)


class Decoder(nn.Module):
    def __init__(self, d_lat=2, d_out=10):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_lat, 32), nn.GELU(), nn.Linear(32, d_out))

    def forward(self, z):
        return self.net(z)


class BetaVAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.decoder = Decoder()

    def forward(self, x):
        mu, logvar = self.encoder(x)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.decoder(z), mu, logvar


def make_data(n=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(n, 2, generator=g) * 2 - 1
    proj = torch.randn(2, 10, generator=g)
    return torch.tanh(t @ proj) + 0.05 * torch.randn(n, 10, generator=g)


def main():
    torch.manual_seed(0)
    data = make_data()
    model = BetaVAE()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    beta_max, steps, bs = 0.5, 24, 64
    for step in range(steps):
        idx = torch.randint(0, len(data), (bs,))
        x = data[idx]
        recon, mu, logvar = model(x)
        rec = F.mse_loss(recon, x, reduction="sum") / bs
        kld = -0.5 * torch.mean(torch.sum(1 + logvar - mu ** 2 - logvar.exp(), dim=1))
        beta = beta_max * min(1.0, step / (steps / 2))
        loss = rec + beta * kld
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 6 == 0:
            print(f"step {step:3d} loss {loss.item():.4f} rec {rec.item():.4f} kld {kld.item():.4f}")

    model.eval()
    means = []
    with torch.no_grad():
        for chunk in data.split(128):
            mu, _ = model.encoder(chunk)
            means.append(mu.numpy())
    means = np.concatenate(means)
    print("latent std per dim:", means.std(axis=0).round(3))


if __name__ == "__main__":
    main()
