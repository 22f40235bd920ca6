"""FP32 training that imports apex only for SyncBatchNorm conversion (falls back to torch's)."""
import argparse

import torch
import torch.nn as nn

try:
    from apex.parallel import convert_syncbn_model
    HAS_APEX = True
except ImportError:
    convert_syncbn_model = None
    HAS_APEX = False

parser = argparse.ArgumentParser()
parser.add_argument("--sync_bn", action="store_true")
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

torch.manual_seed(0)
model = nn.Sequential(nn.Conv1d(4, 16, 3, padding=1), nn.BatchNorm1d(16), nn.ReLU(),
                      nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(16, 3))
if args.sync_bn:
    model = convert_syncbn_model(model) if HAS_APEX else nn.SyncBatchNorm.convert_sync_batchnorm(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
criterion = nn.CrossEntropyLoss()

freqs = torch.tensor([1.0, 2.0, 3.0])
t = torch.linspace(0, 6.28, 32)
for epoch in range(args.epochs):
    for it in range(10):
        labels = torch.randint(0, 3, (32,))
        signal = torch.sin(freqs[labels][:, None] * t)[:, None, :].repeat(1, 4, 1)
        inputs = signal + 0.2 * torch.randn_like(signal)
        output = model(inputs)
        loss = criterion(output, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print("epoch", epoch, "loss", round(loss.item(), 4))
