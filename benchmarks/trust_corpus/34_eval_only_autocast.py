"""FP32 training; only the validation pass already runs under autocast (a partial migration)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
device = "cpu"
W = torch.randn(32, 4)
model = nn.Sequential(nn.Linear(32, 96), nn.ReLU(), nn.Linear(96, 4)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)


def evaluate(model, n=256):
    model.eval()
    x = torch.randn(n, 32)
    y = (x @ W).argmax(1)
    with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
        logits = model(x)
    return (logits.argmax(1) == y).float().mean().item()


for epoch in range(3):
    model.train()
    for _ in range(8):
        x = torch.randn(64, 32, device=device)
        y = (x @ W).argmax(1)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.4f} val acc {evaluate(model):.3f}")
