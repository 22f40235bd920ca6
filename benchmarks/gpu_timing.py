"""The timing half of benchmarks/gpu.py: one process that measures units of work, each one model
in one mode (eager or compiled) and one low-precision dtype, and appends JSON lines to a file.

    python benchmarks/gpu_timing.py RESULTS.jsonl DEADLINE UNIT... [--smoke]

UNIT is `mode:model:dtype` (`eager:resnet50:bfloat16`, `compile:gpt2:float16`; `UNITS` lists
them in the order gpu.py runs them); DEADLINE is a time.time() after which no unit starts (nor
one that the last unit of its model and mode says would not end by then). A unit builds the
FP32, rewritten and hand-written scripts' states on the device, warms each up (which compiles
it, under torch.compile), then runs the three `train()`s in rounds, in the six orders of
round_orders.py (each variant first, last and right after each other one equally often), so
that all three see the same process, allocator and GPU clocks. A run's first `DROP`
steps are left out (each run makes a fresh grad scaler, as a script does); the step time of a
variant is the median of the rest of its steps over all rounds. Rounds stop early when the
next one would pass the unit's share of the time left (`--budget` in gpu.py): at least one
round always runs.

Peak memory of a variant: the most memory allocated during its runs above what was allocated
when the run began, plus what its own state (model, optimizer state, data, compiled graphs'
buffers) holds; so the variants' states held side by side do not count against each other.

Graph breaks, under torch.compile: torch._dynamo's counters of graph breaks and graphs while
the rewrite's and the hand-written version's models are compiled, each alone
(`count_graph_breaks`), and over the timed rounds (where nothing should compile again). The
model is what is compiled, as an expert does, so the rewrite's autocast region and scaler run
around the compiled code: a runtime that broke graphs inside it would show here as more
breaks in the rewrite than in the hand-written torch.amp version.

Lines written: {"kind": "start", "unit": ...} before a unit, {"kind": "result", ...} with its
numbers, {"kind": "end", ...} after it; {"kind": "skipped", ...} for a unit the deadline left
out."""

from __future__ import annotations

import gc
import json
import os
import runpy
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from round_orders import orders  # beside this file, also when imported as a module

SCRIPTS = Path(__file__).resolve().parent / "gpu_scripts"
VARIANTS = ("fp32", "rewrite", "hand")
DTYPES = ("bfloat16", "float16")
MODELS = ("mlp", "resnet50", "gpt2")
MODES = ("eager", "compile")
# The units in the order they run: eager first (both dtypes, cheap), then compiled, bfloat16
# (the runtime's default on an H100) for every model before float16, so that a budget that
# runs short trims compiled float16 first.
UNITS = [*(f"eager:{model}:{dtype}" for model in MODELS for dtype in DTYPES),
         *(f"compile:{model}:{dtype}" for dtype in DTYPES for model in MODELS)]
DROP = 2  # steps left out at the start of each run


def settings(smoke: bool) -> dict[str, Any]:
    """Steps per run, warm-up runs' steps and rounds; the compile backend and device."""
    if smoke:
        return {"steps": DROP + 2, "warmup": 1, "rounds": 2, "backend": "aot_eager",
                "device": "cpu"}
    return {"steps": {"mlp": 24, "resnet50": 9, "gpt2": 9}, "warmup": 3, "rounds": 6,
            "backend": "inductor", "device": "cuda"}


def script_path(model: str, variant: str) -> Path:
    suffix = {"fp32": "fp32", "rewrite": "rewrite", "hand": "torch_amp"}[variant]
    return SCRIPTS / f"{model}_{suffix}.py"


def load(model: str) -> dict[str, dict[str, Callable[..., Any]]]:
    """Each variant's module namespace (its `build` and `train`)."""
    return {variant: runpy.run_path(str(script_path(model, variant))) for variant in VARIANTS}


def set_dtype(dtype: str) -> None:
    """The dtype the rewrite's runtime and the hand-written scripts run in, from now on."""
    import amprewrite_runtime

    os.environ["AMPREWRITE_DTYPE"] = dtype
    amprewrite_runtime.reset_policy()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def allocated(device: torch.device) -> int:
    return torch.cuda.memory_allocated() if device.type == "cuda" else 0


class Variant:
    """One script's state on the device, warmed up, with its timed runs."""

    def __init__(self, namespace: dict[str, Any], device: torch.device, warmup: int) -> None:
        self.train = namespace["train"]
        self.device = device
        synchronize(device)
        before = allocated(device)
        started = time.perf_counter()
        self.state = namespace["build"](device)
        self.train(self.state, warmup)  # compiles, where the model is compiled
        synchronize(device)
        self.warmup_s = time.perf_counter() - started
        self.state_bytes = allocated(device) - before
        self.step_times: list[float] = []
        self.peak_bytes = 0
        self.final_loss = float("nan")

    def run(self, steps: int) -> float:
        """One timed run; its median step time in ms."""
        synchronize(self.device)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        base = allocated(self.device)
        result = self.train(self.state, steps)
        synchronize(self.device)
        if self.device.type == "cuda":
            peak = torch.cuda.max_memory_allocated() - base + self.state_bytes
            self.peak_bytes = max(self.peak_bytes, peak)
        times = result["step_times"][DROP:]
        self.step_times.extend(times)
        self.final_loss = result["losses"][-1]
        return statistics.median(times) * 1000


def dynamo_counts() -> tuple[int, int, Counter[str]]:
    """Graph breaks and graphs torch.compile has made so far in this process, and the breaks'
    reasons (torch._dynamo's own counters)."""
    from torch._dynamo.utils import counters

    reasons: Counter[str] = Counter({str(key)[:160]: value
                                     for key, value in counters["graph_break"].items()})
    return sum(reasons.values()), int(counters["stats"]["unique_graphs"]), reasons


def compiled_since(before: tuple[int, int, Counter[str]]) -> dict[str, Any]:
    """Graph breaks, graphs and break reasons torch.compile made since `before`."""
    breaks, graphs, reasons = dynamo_counts()
    old_breaks, old_graphs, old_reasons = before
    return {"graph_breaks": breaks - old_breaks, "graphs": graphs - old_graphs,
            "reasons": dict(reasons - old_reasons)}


def count_graph_breaks(modules: dict[str, dict[str, Any]], device: torch.device,
                       dtype: str) -> dict[str, dict[str, Any]]:
    """What torch.compile makes of the rewrite's and the hand-written version's models, each
    alone: a smoke-sized state compiled with the `eager` backend (graph breaks are dynamo's
    decision, whatever the backend and the sizes), trained for three steps."""
    saved = {name: os.environ.get(name) for name in ("BENCH_SIZE", "BENCH_COMPILE")}
    os.environ.update(BENCH_SIZE="smoke", BENCH_COMPILE="eager")
    set_dtype(dtype)
    counts = {}
    try:
        for name in ("rewrite", "hand"):
            torch._dynamo.reset()
            before = dynamo_counts()
            modules[name]["train"](modules[name]["build"](device), 3)
            counts[name] = compiled_since(before)
    finally:
        torch._dynamo.reset()
        for name, value in saved.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value
    return counts


def measure(unit: str, modules: dict[str, dict[str, Any]], device: torch.device,
            config: dict[str, Any], share_s: float) -> dict[str, Any]:
    """The three variants of one unit: step times, memory, graph breaks."""
    mode, model, dtype = unit.split(":")
    dynamo = count_graph_breaks(modules, device, dtype) if mode == "compile" else {}
    set_dtype(dtype)
    variants = {name: Variant(modules[name], device, config["warmup"]) for name in VARIANTS}
    steps = config["steps"] if isinstance(config["steps"], int) else config["steps"][model]
    started, rounds, before = time.perf_counter(), 0, dynamo_counts()
    for order in orders(VARIANTS, config["rounds"]):
        for variant in order:
            ms = variants[variant].run(steps)
            print(f"{unit} round {rounds + 1} {variant}: {ms:.2f} ms/step", file=sys.stderr,
                  flush=True)
        rounds += 1
        elapsed = time.perf_counter() - started
        if elapsed * (rounds + 1) / rounds > share_s:
            break
    if mode == "compile":
        dynamo = {**dynamo, "during_runs": compiled_since(before)}
    return {
        "kind": "result", "unit": unit, "mode": mode, "model": model, "dtype": dtype,
        "rounds": rounds, "steps_per_run": steps, "dropped_per_run": DROP,
        "median_ms": {n: statistics.median(v.step_times) * 1000 for n, v in variants.items()},
        "peak_mib": {n: v.peak_bytes / 2**20 for n, v in variants.items()},
        "warmup_s": {n: v.warmup_s for n, v in variants.items()},
        "final_loss": {n: v.final_loss for n, v in variants.items()},
        "dynamo": dynamo,
    }


# Least time a unit needs, until one of its model and mode has run (then: what that took).
FIRST_ESTIMATE_S = {"eager": 10.0, "compile": 60.0}


def run_units(units: list[str], config: dict[str, Any], deadline: float,
              write: Callable[[dict[str, Any]], None]) -> None:
    device = torch.device(config["device"])
    took: dict[str, float] = {}
    for index, unit in enumerate(units):
        mode, model, _ = unit.split(":")
        left = deadline - time.time()
        if left < took.get(f"{mode}:{model}", FIRST_ESTIMATE_S[mode]):
            write({"kind": "skipped", "unit": unit, "why": "budget"})
            continue
        write({"kind": "start", "unit": unit})
        started = time.time()
        if mode == "compile":
            os.environ["BENCH_COMPILE"] = config["backend"]
        else:
            os.environ.pop("BENCH_COMPILE", None)
        torch._dynamo.reset()
        write(measure(unit, load(model), device, config, left / (len(units) - index)))
        took[f"{mode}:{model}"] = time.time() - started
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        write({"kind": "end", "unit": unit})


def main(argv: list[str]) -> int:
    smoke = "--smoke" in argv
    results, deadline, *units = [arg for arg in argv if arg != "--smoke"]
    config = settings(smoke)
    if smoke:
        os.environ["BENCH_SIZE"] = "smoke"
    else:
        torch.set_float32_matmul_precision("high")  # TF32 for FP32, as NVIDIA compares
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
    with open(results, "a", encoding="utf-8") as out:
        def write(record: dict[str, Any]) -> None:
            out.write(json.dumps(record) + "\n")
            out.flush()

        run_units(units, config, float(deadline), write)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
