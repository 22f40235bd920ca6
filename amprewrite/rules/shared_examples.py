"""Sources that several rules' examples share."""

# A training step already in mixed precision, as the rewrite would write it: every rule of the
# mixed-precision recipe, and every migration, leaves it as it is.
MIXED_PRECISION_ALREADY = """\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler()
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda"):
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""
