"""SimCLR-style contrastive pretraining with an NT-Xent loss (temperature, -1e9 diagonal mask)."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_args():
    p = argparse.ArgumentParser()
    p.add_argument("--temperature", type=float, default=0.5)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--lr", type=float, default=3e-3)
    return p.parse_args()


class Projector(nn.Module):
    def __init__(self, d_in=16, d_hid=64, d_out=32):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(d_in, d_hid), nn.BatchNorm1d(d_hid), nn.ReLU())
        self.head = nn.Sequential(nn.Linear(d_hid, d_hid), nn.ReLU(), nn.Linear(d_hid, d_out))

    def forward(self, x):
        return self.head(self.encoder(x))


def augment(x):
    return x * (1 + 0.1 * torch.randn_like(x)) + 0.1 * torch.randn_like(x)


def nt_xent(z1, z2, temperature):
    z = F.normalize(torch.cat([z1, z2], dim=0), dim=1)
    n = z1.shape[0]
    sim = torch.matmul(z, z.t()) / temperature
    mask = torch.eye(2 * n, dtype=torch.bool)
    sim = sim.masked_fill(mask, -1e9)
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
    return F.cross_entropy(sim, targets)


def main():
    args = get_args()
    torch.manual_seed(0)
    prototypes = torch.randn(10, 16)
    model = Projector()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        x = prototypes[torch.randint(0, 10, (args.batch_size,))] + 0.3 * torch.randn(args.batch_size, 16)
        z1, z2 = model(augment(x)), model(augment(x))
        loss = nt_xent(z1, z2, args.temperature)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 5 == 0:
            print(f"step {step}: nt-xent {loss.item():.4f}")


if __name__ == "__main__":
    main()
