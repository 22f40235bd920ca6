import numpy as np
import torch
import torch.autograd as autograd
import torch.nn as nn

# WGAN-GP on 8-dim Gaussian data, constants instead of argparse
LATENT = 6
BATCH = 64
N_CRITIC = 3
LAMBDA_GP = 10
ITERS = 18
torch.manual_seed(3)
np.random.seed(3)

target_mu = torch.linspace(-1, 1, 8)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(LATENT, 64), nn.ReLU(True), nn.Linear(64, 8))

    def forward(self, z):
        return self.net(z)


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 64), nn.LeakyReLU(0.2, True), nn.Linear(64, 1))

    def forward(self, x):
        return self.net(x)


def compute_gradient_penalty(D, real_samples, fake_samples):
    """Calculates the gradient penalty loss for WGAN GP"""
    alpha = torch.rand(real_samples.size(0), 1)
    interpolates = (alpha * real_samples + ((1 - alpha) * fake_samples)).requires_grad_(True)
    d_interpolates = D(interpolates)
    fake = torch.ones(real_samples.shape[0], 1)
    gradients = autograd.grad(
        outputs=d_interpolates,
        inputs=interpolates,
        grad_outputs=fake,
        create_graph=True,
        retain_graph=True,
        only_inputs=True,
    )[0]
    gradients = gradients.view(gradients.size(0), -1)
    return ((gradients.norm(2, dim=1) - 1) ** 2).mean()


generator, discriminator = Generator(), Critic()
optimizer_G = torch.optim.Adam(generator.parameters(), lr=1e-3, betas=(0.5, 0.9))
optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=1e-3, betas=(0.5, 0.9))

d_hist, g_hist = [], []
for it in range(ITERS):
    real_imgs = target_mu + 0.3 * torch.randn(BATCH, 8)
    optimizer_D.zero_grad()
    z = torch.randn(BATCH, LATENT)
    fake_imgs = generator(z)
    real_validity = discriminator(real_imgs)
    fake_validity = discriminator(fake_imgs.detach())
    gradient_penalty = compute_gradient_penalty(discriminator, real_imgs.data, fake_imgs.data)
    d_loss = -torch.mean(real_validity) + torch.mean(fake_validity) + LAMBDA_GP * gradient_penalty
    d_loss.backward()
    optimizer_D.step()
    d_hist.append(d_loss.item())

    if it % N_CRITIC == 0:
        optimizer_G.zero_grad()
        fake_imgs = generator(z)
        g_loss = -torch.mean(discriminator(fake_imgs))
        g_loss.backward()
        optimizer_G.step()
        g_hist.append(g_loss.item())

print("critic loss: %.3f -> %.3f" % (d_hist[0], np.mean(d_hist[-3:])))
print("generator mean error %.3f" % (fake_imgs.mean(0) - target_mu).abs().mean().item())
