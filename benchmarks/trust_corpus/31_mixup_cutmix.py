"""Mixup and CutMix on a small conv net (alternating per batch), numpy beta draws."""
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
np.random.seed(0)
ALPHA = 0.4


def rand_bbox(size, lam):
    W, H = size[2], size[3]
    cut_rat = np.sqrt(1.0 - lam)
    cut_w, cut_h = int(W * cut_rat), int(H * cut_rat)
    cx, cy = np.random.randint(W), np.random.randint(H)
    return (np.clip(cx - cut_w // 2, 0, W), np.clip(cy - cut_h // 2, 0, H),
            np.clip(cx + cut_w // 2, 0, W), np.clip(cy + cut_h // 2, 0, H))


net = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 3),
)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
colors = torch.eye(3)

for i in range(20):
    targets = torch.randint(0, 3, (48,))
    inputs = colors[targets][:, :, None, None] * torch.ones(48, 3, 8, 8) + 0.5 * torch.randn(48, 3, 8, 8)
    lam = np.random.beta(ALPHA, ALPHA)
    index = torch.randperm(inputs.size(0))
    if i % 2 == 0:
        mixed = lam * inputs + (1 - lam) * inputs[index]
    else:
        bbx1, bby1, bbx2, bby2 = rand_bbox(inputs.size(), lam)
        mixed = inputs.clone()
        mixed[:, :, bbx1:bbx2, bby1:bby2] = inputs[index, :, bbx1:bbx2, bby1:bby2]
        lam = 1 - ((bbx2 - bbx1) * (bby2 - bby1) / (inputs.size(-1) * inputs.size(-2)))
    outputs = net(mixed)
    loss = lam * criterion(outputs, targets) + (1 - lam) * criterion(outputs, targets[index])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if i % 5 == 0:
        print("[%2d] loss: %.3f (lam %.2f)" % (i, loss.item(), lam))
