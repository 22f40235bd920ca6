# DDPM-style noise prediction on a 2-D two-moons-ish point cloud.
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

T = 100
torch.manual_seed(0)
np.random.seed(0)

betas = torch.linspace(1e-4, 0.02, T)
alphas = 1.0 - betas
alphas_cumprod = torch.cumprod(alphas, dim=0)
sqrt_ac = torch.sqrt(alphas_cumprod)
sqrt_one_minus_ac = torch.sqrt(1.0 - alphas_cumprod)


def timestep_embedding(t, dim=16):
    half = dim // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class Denoiser(nn.Module):
    def __init__(self, hidden=128):
        super().__init__()
        self.t_proj = nn.Linear(16, hidden)
        self.inp = nn.Linear(2, hidden)
        self.mid = nn.Sequential(nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, 2))

    def forward(self, x, t):
        return self.mid(self.inp(x) + self.t_proj(timestep_embedding(t)))


def q_sample(x0, t, noise):
    return sqrt_ac[t][:, None] * x0 + sqrt_one_minus_ac[t][:, None] * noise


theta = np.random.uniform(0, np.pi, 2000)
points = np.stack([np.cos(theta), np.sin(theta)], 1) + 0.05 * np.random.randn(2000, 2)
dataset = torch.tensor(points, dtype=torch.float32)

model = Denoiser()
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
losses = []
for step in range(25):
    x0 = dataset[torch.randint(0, len(dataset), (128,))]
    t = torch.randint(0, T, (x0.shape[0],))
    noise = torch.randn_like(x0)
    x_t = q_sample(x0, t, noise)
    pred_noise = model(x_t, t)
    loss = F.mse_loss(pred_noise, noise)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
print("noise mse: first %.4f last(avg5) %.4f" % (losses[0], np.mean(losses[-5:])))


@torch.no_grad()
def sample(n=64):
    x = torch.randn(n, 2)
    for i in reversed(range(T)):
        t = torch.full((n,), i, dtype=torch.long)
        eps = model(x, t)
        x = (x - betas[i] / sqrt_one_minus_ac[i] * eps) / torch.sqrt(alphas[i])
        if i > 0:
            x = x + torch.sqrt(betas[i]) * torch.randn_like(x)
    return x


print("sample radius", sample().norm(dim=1).mean().item())
