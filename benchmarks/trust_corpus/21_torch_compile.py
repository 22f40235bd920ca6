"""A tiny regression model whose custom loss is compiled with torch.compile (eager backend)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
true_w = torch.randn(16, 1)
x_all = torch.randn(512, 16)
y_all = x_all @ true_w + 0.01 * torch.randn(512, 1)


@torch.compile(backend="eager")
def log_cosh_loss(pred, target):
    diff = pred - target
    return torch.mean(diff + F.softplus(-2.0 * diff) - 0.6931471805599453)


model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

for epoch in range(2):
    for i in range(0, 512, 64):
        xb, yb = x_all[i:i + 64], y_all[i:i + 64]
        pred = model(xb)
        loss = log_cosh_loss(pred, yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch}: loss {loss.item():.4f}")
