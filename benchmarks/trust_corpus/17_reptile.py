# Reptile (Nichol et al.) on linear-regression tasks: inner SGD on a copy, outer interpolation.
import copy

import torch
import torch.nn as nn

torch.manual_seed(4)
INNER_STEPS = 4
OUTER_ITERS = 12
EPS_OUTER = 0.5
BASE = torch.randn(8)

net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
loss_fn = nn.MSELoss()


def task_batch():
    w = BASE + 0.3 * torch.randn(8)
    x = torch.randn(32, 8)
    return x, (x @ w).unsqueeze(1)


meta_losses = []
for outer in range(OUTER_ITERS):
    x, y = task_batch()
    learner = copy.deepcopy(net)
    inner_opt = torch.optim.SGD(learner.parameters(), lr=0.05)
    for _ in range(INNER_STEPS):
        pred = learner(x)
        loss = loss_fn(pred, y)
        inner_opt.zero_grad()
        loss.backward()
        inner_opt.step()
    with torch.no_grad():
        for p, q in zip(net.parameters(), learner.parameters()):
            p.add_(EPS_OUTER * (q - p))
        meta_losses.append(loss_fn(net(x), y).item())
print("meta loss %.3f -> %.3f" % (meta_losses[0], meta_losses[-1]))
