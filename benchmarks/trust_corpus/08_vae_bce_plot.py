"""VAE on 8x8 synthetic 'digits' (after pytorch/examples vae): BCE reconstruction, sigmoid decoder."""
import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn, optim  # noqa: E402
from torch.nn import functional as F  # noqa: E402

parser = argparse.ArgumentParser(description="VAE example")
parser.add_argument("--batch-size", type=int, default=32, metavar="N")
parser.add_argument("--epochs", type=int, default=2, metavar="N")
parser.add_argument("--seed", type=int, default=1, metavar="S")
args = parser.parse_args()
torch.manual_seed(args.seed)

# eight bar patterns with pixel noise, values in [0, 1]
patterns = torch.zeros(8, 64)
for k in range(8):
    img = torch.zeros(8, 8)
    img[k, :] = 1.0
    img[:, (k + 3) % 8] = 1.0
    patterns[k] = img.flatten()
data = patterns[torch.randint(0, 8, (320,))]
data = (data * 0.9 + 0.1 * torch.rand_like(data)).clamp(0, 1)
train_loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=True)


class VAE(nn.Module):
    def __init__(self):
        super(VAE, self).__init__()
        self.fc1 = nn.Linear(64, 48)
        self.fc21 = nn.Linear(48, 4)
        self.fc22 = nn.Linear(48, 4)
        self.fc3 = nn.Linear(4, 48)
        self.fc4 = nn.Linear(48, 64)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 64))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


model = VAE()
optimizer = optim.Adam(model.parameters(), lr=3e-3)


def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 64), reduction="sum")
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


def train(epoch):
    model.train()
    train_loss = 0
    for batch_idx, data in enumerate(train_loader):
        optimizer.zero_grad()
        recon_batch, mu, logvar = model(data)
        loss = loss_function(recon_batch, data, mu, logvar)
        loss.backward()
        train_loss += loss.item()
        optimizer.step()
    print("====> Epoch: {} Average loss: {:.4f}".format(epoch, train_loss / len(train_loader.dataset)))
    return recon_batch, data


for epoch in range(1, args.epochs + 1):
    recon, original = train(epoch)

fig, axes = plt.subplots(2, 4, figsize=(4, 2))
for i in range(4):
    axes[0, i].imshow(original[i].view(8, 8).data.numpy(), cmap="gray")
    axes[1, i].imshow(recon[i].view(8, 8).data.numpy(), cmap="gray")
fig.savefig("vae_reconstruction.png")
plt.close(fig)
