import torch
import torch.nn as nn
import torch.nn.functional as F


class MultiTaskNet(nn.Module):
    """Shared trunk, three heads: classification, regression and a binary attribute."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.heads = nn.ModuleDict({"cls": nn.Linear(64, 4), "reg": nn.Linear(64, 1), "attr": nn.Linear(64, 1)})

    def forward(self, x):
        h = self.trunk(x)
        return {name: head(h) for name, head in self.heads.items()}


LOSS_WEIGHTS = {"cls": 1.0, "reg": 0.5, "attr": 0.5}


def compute_losses(outputs, batch):
    return {
        "cls": F.cross_entropy(outputs["cls"], batch["label"]),
        "reg": F.mse_loss(outputs["reg"].squeeze(1), batch["value"]),
        "attr": F.binary_cross_entropy_with_logits(outputs["attr"].squeeze(1), batch["flag"]),
    }


torch.manual_seed(0)
model = MultiTaskNet()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
A = torch.randn(16, 4)
meters = {k: [] for k in LOSS_WEIGHTS}
for step in range(24):
    x = torch.randn(64, 16)
    batch = {"label": (x @ A).argmax(1), "value": x[:, 0] * 2 - x[:, 1], "flag": (x[:, 2] > 0).float()}
    outputs = model(x)
    loss_dict = compute_losses(outputs, batch)
    total = sum(LOSS_WEIGHTS[k] * v for k, v in loss_dict.items())
    optimizer.zero_grad()
    total.backward()
    optimizer.step()
    for k, v in loss_dict.items():
        meters[k].append(v.item())
    if step % 6 == 0:
        print(f"step {step} total {total.item():.3f} " + " ".join(f"{k} {v[-1]:.3f}" for k, v in meters.items()))
