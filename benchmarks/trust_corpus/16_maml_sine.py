"""MAML on sine regression: inner loop on torch.func.functional_call with
autograd.grad(create_graph=True)."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

np.random.seed(0)
torch.manual_seed(0)
INNER_LR, META_LR, INNER_STEPS, META_BATCH = 0.02, 5e-3, 1, 4


def sample_task():
    amp, phase = np.random.uniform(0.5, 2.0), np.random.uniform(0, np.pi)

    def draw(k=10):
        x = torch.rand(k, 1) * 10 - 5
        return x, amp * torch.sin(x + phase)
    return draw


model = nn.Sequential(nn.Linear(1, 40), nn.ReLU(), nn.Linear(40, 40), nn.ReLU(), nn.Linear(40, 1))
meta_optimizer = torch.optim.Adam(model.parameters(), lr=META_LR)

for iteration in range(20):
    meta_loss = 0.0
    for _ in range(META_BATCH):
        task = sample_task()
        x_s, y_s = task()
        x_q, y_q = task()
        fast = dict(model.named_parameters())
        for _ in range(INNER_STEPS):
            inner_loss = F.mse_loss(functional_call(model, fast, (x_s,)), y_s)
            grads = torch.autograd.grad(inner_loss, list(fast.values()), create_graph=True)
            fast = {name: p - INNER_LR * g for (name, p), g in zip(fast.items(), grads)}
        meta_loss = meta_loss + F.mse_loss(functional_call(model, fast, (x_q,)), y_q)
    meta_loss = meta_loss / META_BATCH
    meta_optimizer.zero_grad()
    meta_loss.backward()
    meta_optimizer.step()
    if iteration % 5 == 0:
        print(f"meta-iter {iteration}: query loss {meta_loss.item():.4f}")
