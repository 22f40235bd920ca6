"""Classifier with an exponential moving average of the weights, evaluated with the EMA copy."""
import copy

import numpy as np
import torch
import torch.nn as nn


class ModelEMA:
    def __init__(self, model, decay=0.9):
        self.ema = copy.deepcopy(model).eval()
        self.decay = decay
        for p in self.ema.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model):
        msd = model.state_dict()
        for k, v in self.ema.state_dict().items():
            if v.dtype.is_floating_point:
                v.mul_(self.decay).add_(msd[k].detach(), alpha=1 - self.decay)


def accuracy(model, x, y):
    with torch.no_grad():
        pred = model(x).argmax(dim=1).numpy()
    return float(np.mean(pred == y.numpy()))


torch.manual_seed(0)
centers = torch.randn(6, 24) * 0.3
y_all = torch.randint(0, 6, (1200,))
x_all = centers[y_all] + torch.randn(1200, 24)
x_train, y_train, x_val, y_val = x_all[:1000], y_all[:1000], x_all[1000:], y_all[1000:]

model = nn.Sequential(nn.Linear(24, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 6))
ema = ModelEMA(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
criterion = nn.CrossEntropyLoss()

for step, idx in enumerate(torch.randperm(1000).split(50)):
    model.train()
    loss = criterion(model(x_train[idx]), y_train[idx])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    ema.update(model)
    if step % 5 == 4:
        print(f"step {step + 1}: loss {loss.item():.3f} val acc {accuracy(model, x_val, y_val):.3f}"
              f" ema acc {accuracy(ema.ema, x_val, y_val):.3f}")
