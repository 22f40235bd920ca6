"""Linear softmax regression trained either by an optimizer or by a hand-written SGD update."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--use_optimizer", action="store_true", default=False)
parser.add_argument("--lr", type=float, default=0.5)
parser.add_argument("--iters", type=int, default=20)
args = parser.parse_args()

torch.manual_seed(0)
x = torch.randn(256, 16)
y = (x[:, :4].sum(1) > 0).long() + (x[:, 4] > 1).long()
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
if args.use_optimizer:
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

for it in range(args.iters):
    logits = model(x)
    loss = F.cross_entropy(logits, y)
    if args.use_optimizer:
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    else:
        model.zero_grad()
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-args.lr)
    if it % 5 == 0:
        print(it, loss.item())
