"""MAML on sine regression: functional inner loop with autograd.grad(create_graph=True)."""
import numpy as np
import torch
import torch.nn.functional as F

np.random.seed(0)
torch.manual_seed(0)
INNER_LR, META_LR, INNER_STEPS, META_BATCH = 0.02, 1e-3, 1, 4


def sample_task():
    amp, phase = np.random.uniform(0.5, 2.0), np.random.uniform(0, np.pi)

    def draw(k=10):
        x = torch.rand(k, 1) * 10 - 5
        return x, amp * torch.sin(x + phase)
    return draw


def init_params():
    def layer(i, o):
        w = torch.empty(o, i)
        torch.nn.init.kaiming_uniform_(w, a=5 ** 0.5)
        return [w.requires_grad_(), torch.zeros(o, requires_grad=True)]
    return layer(1, 40) + layer(40, 40) + layer(40, 1)


def forward(params, x):
    h = F.relu(F.linear(x, params[0], params[1]))
    h = F.relu(F.linear(h, params[2], params[3]))
    return F.linear(h, params[4], params[5])


params = init_params()
meta_optimizer = torch.optim.Adam(params, lr=META_LR)

for iteration in range(20):
    meta_loss = 0.0
    for _ in range(META_BATCH):
        task = sample_task()
        x_s, y_s = task()
        x_q, y_q = task()
        fast = params
        for _ in range(INNER_STEPS):
            inner_loss = F.mse_loss(forward(fast, x_s), y_s)
            grads = torch.autograd.grad(inner_loss, fast, create_graph=True)
            fast = [p - INNER_LR * g for p, g in zip(fast, grads)]
        meta_loss = meta_loss + F.mse_loss(forward(fast, x_q), y_q)
    meta_loss = meta_loss / META_BATCH
    meta_optimizer.zero_grad()
    meta_loss.backward()
    meta_optimizer.step()
    if iteration % 5 == 0:
        print(f"meta-iter {iteration}: query loss {meta_loss.item():.4f}")
