"""A ResNet-50 (torchvision's layout: bottleneck blocks, 3-4-6-3, BatchNorm, written here in
plain torch) trained on synthetic 224x224 batches of 128 in channels_last, for
benchmarks/gpu.py: SGD with momentum and weight decay, cross-entropy over 1000 classes.

Mixed precision written by hand with torch.amp, as an expert would: autocast around the forward
pass and the loss in AMPREWRITE_DTYPE (float16 or bfloat16; default: float16 on cuda, bfloat16
elsewhere), a GradScaler that is on for float16 only (the TF32 setting is the caller's).

`build(device)` makes the model (compiled with `torch.compile(backend=BENCH_COMPILE)` when
that variable is set), optimizer and data once; `train(state, steps)` runs `steps` steps and
returns each step's time (seconds, the device synchronized) and loss. BENCH_SIZE=smoke makes
everything tiny (a CPU check of the code paths).
"""

import os
import time

import torch
from torch import nn

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, in_channels: int, width: int, stride: int) -> None:
        super().__init__()
        out_channels = width * self.expansion
        self.conv1 = nn.Conv2d(in_channels, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or in_channels != out_channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet50(nn.Module):
    def __init__(self, num_classes: int = 1000, layers: tuple = (3, 4, 6, 3),
                 widths: tuple = (64, 128, 256, 512)) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(widths[0]), nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1))
        blocks, in_channels = [], widths[0]
        for index, (width, count) in enumerate(zip(widths, layers, strict=True)):
            for block in range(count):
                stride = 2 if index > 0 and block == 0 else 1
                blocks.append(Bottleneck(in_channels, width, stride))
                in_channels = width * Bottleneck.expansion
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


def build(device: torch.device) -> dict:
    smoke = os.environ.get("BENCH_SIZE") == "smoke"
    batch, size, layers, widths = ((2, 32, (1, 1, 1, 1), (4, 4, 8, 8)) if smoke
                                   else (128, 224, (3, 4, 6, 3), (64, 128, 256, 512)))
    torch.manual_seed(0)
    model = ResNet50(layers=layers, widths=widths).to(device, memory_format=torch.channels_last)
    backend = os.environ.get("BENCH_COMPILE")
    if backend:
        model = torch.compile(model, backend=backend)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    batches = [(torch.randn(batch, 3, size, size, device=device)
                .contiguous(memory_format=torch.channels_last),
                torch.randint(0, 1000, (batch,), device=device)) for _ in range(4)]
    model.train()
    return {"model": model, "optimizer": optimizer, "batches": batches, "device": device}


def train(state: dict, steps: int) -> dict:
    model, optimizer, device = state["model"], state["optimizer"], state["device"]
    loss_fn = nn.CrossEntropyLoss()
    dtype = DTYPES[os.environ.get("AMPREWRITE_DTYPE")
                   or ("float16" if device.type == "cuda" else "bfloat16")]
    scaler = torch.amp.GradScaler(device.type, enabled=(dtype == torch.float16))
    step_times, losses = [], []
    for step in range(steps):
        inputs, targets = state["batches"][step % len(state["batches"])]
        started = time.perf_counter()
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=dtype):
            outputs = model(inputs)
            loss = loss_fn(outputs, targets)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        if device.type == "cuda":
            torch.cuda.synchronize()
        step_times.append(time.perf_counter() - started)
        losses.append(loss.item())
    return {"step_times": step_times, "losses": losses}
