"""Training loop that skips a batch whose gradient norm is not finite (common in LM code)."""
import argparse

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--max-grad-norm", type=float, default=1.0)
parser.add_argument("--steps", type=int, default=24)
args = parser.parse_args()

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(10, 64), nn.Tanh(), nn.Linear(64, 3))
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=0.01)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 5))
W = torch.randn(10, 3)
skipped = 0
for step in range(args.steps):
    x = torch.randn(64, 10)
    y = (x @ W).argmax(1)
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
    if not torch.isfinite(grad_norm):
        skipped += 1
        optimizer.zero_grad()
        continue
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    if step % 6 == 0:
        print(f"step {step} loss {loss.item():.4f} grad_norm {grad_norm.item():.3f}")
print("skipped", skipped)
