"""Train the MLP of the R torch AMP article in FP32: three Linear(4096, 4096) layers with ReLU,
batch 512, SGD, MSE loss, on random data made up front.

Environment: AMPREWRITE_DEVICE (default: cuda when available, else cpu), BENCH_STEPS,
BENCH_SEED. Prints one JSON line: the time of each step (seconds) and each step's loss.
"""

import json
import os
import time

import torch
from torch import nn


def main() -> dict[str, list[float]]:
    device = torch.device(
        os.environ.get("AMPREWRITE_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu"))
    steps = int(os.environ.get("BENCH_STEPS", "20"))
    torch.manual_seed(int(os.environ.get("BENCH_SEED", "0")))

    model = nn.Sequential(
        nn.Linear(4096, 4096), nn.ReLU(),
        nn.Linear(4096, 4096), nn.ReLU(),
        nn.Linear(4096, 4096),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.MSELoss()
    batches = [(torch.randn(512, 4096, device=device), torch.randn(512, 4096, device=device))
               for _ in range(8)]

    step_times, losses = [], []
    for step in range(steps):
        inputs, targets = batches[step % len(batches)]
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


if __name__ == "__main__":
    print(json.dumps(main()))
