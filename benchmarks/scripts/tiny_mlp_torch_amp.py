"""tiny_mlp_fp32.py with mixed precision written by hand with torch.amp: autocast around the
forward pass and the loss, a GradScaler that is on for float16 only.

Environment: AMPREWRITE_DEVICE (default: cuda when available, else cpu), AMPREWRITE_DTYPE
(float16 or bfloat16; default: float16 on cuda, bfloat16 elsewhere), BENCH_STEPS,
BENCH_SEED. Prints one JSON line: the time of each step (seconds) and each step's loss.
"""

import json
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def main() -> dict[str, list[float]]:
    device = torch.device(
        os.environ.get("AMPREWRITE_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = DTYPES[os.environ.get("AMPREWRITE_DTYPE")
                   or ("float16" if device.type == "cuda" else "bfloat16")]
    steps = int(os.environ.get("BENCH_STEPS", "500"))
    torch.manual_seed(int(os.environ.get("BENCH_SEED", "0")))

    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(device.type, enabled=(dtype == torch.float16))
    batches = [(torch.randn(64, 256, device=device), torch.randint(0, 10, (64,), device=device))
               for _ in range(16)]

    step_times, losses = [], []
    for step in range(steps):
        inputs, labels = batches[step % len(batches)]
        started = time.perf_counter()
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=dtype):
            logits = model(inputs)
            loss = F.cross_entropy(logits, labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        if device.type == "cuda":
            torch.cuda.synchronize()
        step_times.append(time.perf_counter() - started)
        losses.append(loss.item())
    return {"step_times": step_times, "losses": losses}


if __name__ == "__main__":
    print(json.dumps(main()))
