"""Step traces and a step budget, read from the environment (what `amprewrite compare` uses).

- `AMPREWRITE_TRACE=path.jsonl` appends one JSON object per optimizer step taken through
  `GradScaler.step()`: `{"step", "iteration", "loss", "scale", "skipped", "time_s",
  "opt_level", "dtype", "device", "device_name", "device_features", "fast_dtypes"}`. In
  distributed training, rank 0 writes them.
- `AMPREWRITE_MAX_STEPS=N` ends the run cleanly (`SystemExit(0)` from `GradScaler.update()`)
  once N optimizer steps were taken.
- `AMPREWRITE_SEED=N` seeds Python's `random`, NumPy (where installed) and torch when the
  runtime is imported (`seed_from_environment`), before the script builds its model: the
  two runs of `amprewrite compare` start alike.

An iteration runs from one `update()` to the next (the first starts at the first `scale()`).
`loss` is the last loss passed to `scale()` before the step (unscaled; null when it was not a
one-element tensor), `scale` the loss scale the step used (1.0 when not scaling). `time_s` is
the wall time from the start of the iteration to the end of this step (after
`torch.cuda.synchronize()` on CUDA): with one optimizer, the iteration's time; with several
(a GAN), one record per `step()`, all with the same `iteration`, and the last one's `time_s`
is the iteration's. The first iteration's time leaves out its forward pass.

`device_name` is the GPU's name or the CPU's model name; `device_features` what makes low
precision fast there (the GPU's compute capability; the CPU's AMX and AVX-512 BF16/FP16 flags);
`fast_dtypes` the low-precision dtypes it has fast matrix units for (tensor cores: float16 from
compute capability 7.0, bfloat16 from 8.0; a CPU: bfloat16 with AMX-BF16 or AVX-512 BF16,
float16 with AMX-FP16 or AVX-512 FP16), null when unknown (a CPU without /proc/cpuinfo).

Off (both variables unset) the scaler holds `None` and each hook costs one attribute check.
The scaler hands the tracer a `StepRecord` (what it knows of the step), never itself.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import IO, Any

import torch

from amprewrite_runtime.data.seeding import seed_everything

ENV_TRACE = "AMPREWRITE_TRACE"
ENV_MAX_STEPS = "AMPREWRITE_MAX_STEPS"
ENV_SEED = "AMPREWRITE_SEED"


@dataclass(frozen=True)
class StepRecord:
    """What the scaler knows of an optimizer step, for its trace record."""

    opt_level: str
    dtype: str  # "float32" at O0
    device: str  # a device type
    scale: float
    skipped: bool


class Tracer:
    """Per-process hooks for `GradScaler.scale()`, `step()` and `update()`."""

    _shared: Tracer | None = None  # one per process, whatever the number of scalers

    def __init__(self, path: str | None, max_steps: int | None) -> None:
        self.path = path
        self.max_steps = max_steps
        self.steps = 0
        self.iterations = 0
        self._file: IO[str] | None = None
        self._loss: torch.Tensor | None = None
        self._started: float | None = None
        self._devices: dict[str, dict[str, Any]] = {}
        self.scaler_owned = False  # an amprewrite_runtime GradScaler traces the steps

    @classmethod
    def from_env(cls) -> Tracer | None:
        """The process's tracer when `AMPREWRITE_TRACE` or `AMPREWRITE_MAX_STEPS` is set."""
        path = os.environ.get(ENV_TRACE) or None
        max_steps = _max_steps()
        if path is None and max_steps is None:
            return None
        shared = cls._shared
        if shared is None or (shared.path, shared.max_steps) != (path, max_steps):
            if shared is not None:
                shared.close()
            shared = cls._shared = cls(path, max_steps)
        return shared

    def on_scale(self, outputs: Any) -> None:
        """Remember the loss (a one-element tensor, or the first of a list or tuple)."""
        if self._started is None:
            self._started = time.perf_counter()
        if isinstance(outputs, list | tuple):
            outputs = next((item for item in outputs if isinstance(item, torch.Tensor)), None)
        is_loss = isinstance(outputs, torch.Tensor) and outputs.numel() == 1
        self._loss = outputs.detach() if is_loss else None

    @property
    def writes(self) -> bool:
        """Whether this process writes records: a trace file is set, and it is rank 0."""
        return self.path is not None and _rank() == 0

    def on_step(self, step: StepRecord | None) -> None:
        """Count the step and write its record (`step` is None where `writes` is False)."""
        self.steps += 1
        if step is None or self.path is None:
            return
        if step.device == "cuda":
            torch.cuda.synchronize()
        now = time.perf_counter()
        started = now if self._started is None else self._started
        record = {
            "step": self.steps,
            "iteration": self.iterations + 1,
            "loss": None if self._loss is None else float(self._loss.item()),
            "scale": step.scale,
            "skipped": step.skipped,
            "time_s": now - started,
            "opt_level": step.opt_level,
            "dtype": step.dtype,
            "device": step.device,
        }
        if step.device not in self._devices:
            self._devices[step.device] = device_info(step.device)
        record.update(self._devices[step.device])
        if self._file is None:
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def on_update(self) -> None:
        """Start the next iteration; end the run once `AMPREWRITE_MAX_STEPS` steps were taken."""
        self.iterations += 1
        if self.max_steps is not None and self.steps >= self.max_steps:
            self.close()
            raise SystemExit(0)
        self._started = time.perf_counter()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


# CPU flags (/proc/cpuinfo) that give a dtype fast matrix units, and how they are shown.
CPU_FEATURES = {"amx_bf16": ("AMX-BF16", "bfloat16"), "avx512_bf16": ("AVX-512 BF16", "bfloat16"),
                "amx_fp16": ("AMX-FP16", "float16"), "avx512_fp16": ("AVX-512 FP16", "float16")}


def device_info(device: str) -> dict[str, Any]:
    """The device's name, what makes low precision fast on it, and the dtypes that are."""
    if device == "cuda":
        index = torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        fast = [dtype for dtype, since in (("float16", 7), ("bfloat16", 8)) if major >= since]
        return {"device_name": torch.cuda.get_device_name(index),
                "device_features": [f"compute capability {major}.{minor}"], "fast_dtypes": fast}
    name, flags = _cpu()
    if flags is None:
        return {"device_name": name, "device_features": [], "fast_dtypes": None}
    found = [CPU_FEATURES[flag] for flag in CPU_FEATURES if flag in flags]
    return {"device_name": name, "device_features": [shown for shown, _ in found],
            "fast_dtypes": sorted({dtype for _, dtype in found})}


def _cpu() -> tuple[str, set[str] | None]:
    """The CPU's model name and flags from /proc/cpuinfo (Linux); flags None elsewhere."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as stream:
            fields = {key.strip(): value.strip() for key, _, value in
                      (line.partition(":") for line in stream)}  # the last CPU's
    except OSError:
        return platform.processor() or "CPU", None
    name = fields.get("model name") or platform.processor() or "CPU"
    return name, set(fields.get("flags", "").split())


def _rank() -> int:
    """This process's rank in distributed training (0 when not distributed): one rank traces,
    so that the records of a multi-process run are one run's."""
    distributed = torch.distributed
    if distributed.is_available() and distributed.is_initialized():
        return distributed.get_rank()
    return 0


def _max_steps() -> int | None:
    value = os.environ.get(ENV_MAX_STEPS)
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{ENV_MAX_STEPS}={value!r} is not valid; use a positive integer")
    return int(value)


def seed_from_environment() -> int | None:
    """Seed every RNG (`seed_everything`) with `AMPREWRITE_SEED`, where it is set; the seed,
    else None."""
    value = os.environ.get(ENV_SEED)
    if not value:
        return None
    if not value.isdigit():
        raise ValueError(f"{ENV_SEED}={value!r} is not valid; use a non-negative integer")
    seed_everything(int(value))
    return int(value)
