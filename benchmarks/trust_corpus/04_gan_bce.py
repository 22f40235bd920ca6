# Vanilla GAN in the PyTorch-GAN style: BCELoss on a sigmoid discriminator, 2-D ring data.
import argparse

import numpy as np
import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--n_epochs", type=int, default=12, help="number of epochs of training")
parser.add_argument("--batch_size", type=int, default=64, help="size of the batches")
parser.add_argument("--lr", type=float, default=0.002, help="adam: learning rate")
parser.add_argument("--b1", type=float, default=0.5, help="adam: decay of first order momentum")
parser.add_argument("--b2", type=float, default=0.999, help="adam: decay of second order momentum")
parser.add_argument("--latent_dim", type=int, default=8, help="dimensionality of the latent space")
opt = parser.parse_args()
print(opt)

torch.manual_seed(1)
np.random.seed(1)
data_rng = np.random.RandomState(1)


def sample_real(n):
    angle = data_rng.uniform(0, 2 * np.pi, size=n)
    pts = np.stack([np.cos(angle), np.sin(angle)], axis=1) * 2.0
    return torch.tensor(pts + 0.05 * data_rng.randn(n, 2), dtype=torch.float32)


class Generator(nn.Module):
    def __init__(self):
        super(Generator, self).__init__()
        self.model = nn.Sequential(
            nn.Linear(opt.latent_dim, 64),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(64, 64),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(64, 2),
        )

    def forward(self, z):
        return self.model(z)


class Discriminator(nn.Module):
    def __init__(self):
        super(Discriminator, self).__init__()
        self.model = nn.Sequential(
            nn.Linear(2, 64),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Linear(64, 1),
            nn.Sigmoid(),
        )

    def forward(self, img):
        return self.model(img)


adversarial_loss = torch.nn.BCELoss()
generator = Generator()
discriminator = Discriminator()
optimizer_G = torch.optim.Adam(generator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))
optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=opt.lr, betas=(opt.b1, opt.b2))
Tensor = torch.FloatTensor

for epoch in range(opt.n_epochs):
    real_imgs = sample_real(opt.batch_size)
    valid = Tensor(real_imgs.size(0), 1).fill_(1.0)
    fake = Tensor(real_imgs.size(0), 1).fill_(0.0)

    # -----------------
    #  Train Generator
    # -----------------
    optimizer_G.zero_grad()
    z = Tensor(np.random.normal(0, 1, (real_imgs.shape[0], opt.latent_dim)))
    gen_imgs = generator(z)
    g_loss = adversarial_loss(discriminator(gen_imgs), valid)
    g_loss.backward()
    optimizer_G.step()

    # ---------------------
    #  Train Discriminator
    # ---------------------
    optimizer_D.zero_grad()
    real_loss = adversarial_loss(discriminator(real_imgs), valid)
    fake_loss = adversarial_loss(discriminator(gen_imgs.detach()), fake)
    d_loss = (real_loss + fake_loss) / 2
    d_loss.backward()
    optimizer_D.step()

    print("[Epoch %d/%d] [D loss: %f] [G loss: %f]" % (epoch, opt.n_epochs, d_loss.item(), g_loss.item()))

samples = gen_imgs.data.numpy()
print("generated radius mean %.3f" % np.linalg.norm(samples, axis=1).mean())
