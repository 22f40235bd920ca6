"""WGAN with weight clipping: the critic trains n_critic times per generator step."""
import argparse

import numpy as np
import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--n_iters", type=int, default=20)
parser.add_argument("--batch_size", type=int, default=64)
parser.add_argument("--lr", type=float, default=0.001)
parser.add_argument("--n_critic", type=int, default=2, help="critic steps per generator step")
parser.add_argument("--clip_value", type=float, default=0.05, help="critic weight clip")
parser.add_argument("--latent_dim", type=int, default=4)
opt = parser.parse_args()

torch.manual_seed(0)
MEAN = torch.tensor([1.5, -0.5, 0.5, 2.0])


def real_batch(n):
    return MEAN + 0.2 * torch.randn(n, 4)


generator = nn.Sequential(nn.Linear(opt.latent_dim, 32), nn.ReLU(), nn.Linear(32, 4))
critic = nn.Sequential(nn.Linear(4, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
optimizer_G = torch.optim.RMSprop(generator.parameters(), lr=opt.lr)
optimizer_D = torch.optim.RMSprop(critic.parameters(), lr=opt.lr)

batches_done = 0
for i in range(opt.n_iters):
    real_imgs = real_batch(opt.batch_size)
    optimizer_D.zero_grad()
    z = torch.randn(opt.batch_size, opt.latent_dim)
    fake_imgs = generator(z).detach()
    loss_D = -torch.mean(critic(real_imgs)) + torch.mean(critic(fake_imgs))
    loss_D.backward()
    optimizer_D.step()
    for p in critic.parameters():
        p.data.clamp_(-opt.clip_value, opt.clip_value)

    if i % opt.n_critic == 0:
        optimizer_G.zero_grad()
        gen_imgs = generator(z)
        loss_G = -torch.mean(critic(gen_imgs))
        loss_G.backward()
        optimizer_G.step()
        print("[Iter %d/%d] [D loss: %f] [G loss: %f]" % (i, opt.n_iters, loss_D.item(), loss_G.item()))
    batches_done += 1

gap = (gen_imgs.detach().mean(0) - MEAN).abs().mean()
print("mean gap to data %.3f" % np.float64(gap))
