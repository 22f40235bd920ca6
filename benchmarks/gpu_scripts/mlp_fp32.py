"""The MLP of the R torch AMP vignette (the seed's own benchmark), for benchmarks/gpu.py, in
FP32: three Linear(4096, 4096) layers with ReLU, batch 512, SGD, MSE loss, random data made
up front.

`build(device)` makes the model (compiled with `torch.compile(backend=BENCH_COMPILE)` when
that variable is set), optimizer and data once; `train(state, steps)` runs `steps` steps and
returns each step's time (seconds, the device synchronized) and loss. BENCH_SIZE=smoke makes
everything tiny (a CPU check of the code paths).
"""

import os
import time

import torch
from torch import nn


def build(device: torch.device) -> dict:
    width, batch = (64, 8) if os.environ.get("BENCH_SIZE") == "smoke" else (4096, 512)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(width, width), nn.ReLU(),
        nn.Linear(width, width), nn.ReLU(),
        nn.Linear(width, width),
    ).to(device)
    backend = os.environ.get("BENCH_COMPILE")
    if backend:
        model = torch.compile(model, backend=backend)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [(torch.randn(batch, width, device=device), torch.randn(batch, width, device=device))
               for _ in range(4)]
    return {"model": model, "optimizer": optimizer, "batches": batches, "device": device}


def train(state: dict, steps: int) -> dict:
    model, optimizer, device = state["model"], state["optimizer"], state["device"]
    loss_fn = nn.MSELoss()
    step_times, losses = [], []
    for step in range(steps):
        inputs, targets = state["batches"][step % len(state["batches"])]
        started = time.perf_counter()
        optimizer.zero_grad()
        outputs = model(inputs)
        loss = loss_fn(outputs, targets)
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        step_times.append(time.perf_counter() - started)
        losses.append(loss.item())
    return {"step_times": step_times, "losses": losses}
