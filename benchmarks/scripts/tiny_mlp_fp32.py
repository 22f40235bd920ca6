"""Train a tiny MLP in FP32 (two Linear layers of width 256, batch 64, 10 classes,
cross-entropy, SGD): so small that the per-step cost of the training loop's Python shows.

Environment: AMPREWRITE_DEVICE (default: cuda when available, else cpu), BENCH_STEPS,
BENCH_SEED. Prints one JSON line: the time of each step (seconds) and each step's loss.
"""

import json
import os
import time

import torch
import torch.nn.functional as F
from torch import nn


def main() -> dict[str, list[float]]:
    device = torch.device(
        os.environ.get("AMPREWRITE_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu"))
    steps = int(os.environ.get("BENCH_STEPS", "500"))
    torch.manual_seed(int(os.environ.get("BENCH_SEED", "0")))

    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [(torch.randn(64, 256, device=device), torch.randint(0, 10, (64,), device=device))
               for _ in range(16)]

    step_times, losses = [], []
    for step in range(steps):
        inputs, labels = batches[step % len(batches)]
        started = time.perf_counter()
        optimizer.zero_grad()
        logits = model(inputs)
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        step_times.append(time.perf_counter() - started)
        losses.append(loss.item())
    return {"step_times": step_times, "losses": losses}


if __name__ == "__main__":
    print(json.dumps(main()))
