"""What the benchmarks of rewritten scripts share: the model scripts in their three variants,
running one, the devices and dtypes to measure, the machine, tables and JSON.

Each model has an FP32 script (`scripts/<model>_fp32.py`) and a hand-written torch.amp one
(`scripts/<model>_torch_amp.py`); the third variant, amprewrite's O1 rewrite of the FP32
script, is made at benchmark time. The scripts read AMPREWRITE_DEVICE, AMPREWRITE_DTYPE (the
variables the rewrite's runtime reads), BENCH_STEPS and BENCH_SEED, and print one JSON line:
`{"step_times": [seconds, ...], "losses": [...]}`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import runpy
import statistics
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import torch
from round_orders import orders

from amprewrite.engine import rewrite_source
from amprewrite.options import Options

SCRIPTS = Path(__file__).resolve().parent / "scripts"
VARIANTS = ("fp32", "rewrite", "hand")
# The low-precision dtypes measured on each device; the first is the runtime's default there.
DTYPES_BY_DEVICE = {"cpu": ("bfloat16",), "cuda": ("float16", "bfloat16")}
SEED = 0
# Runtime settings a caller's environment could hold that would change what is measured.
CLEARED = ("AMPREWRITE_OPT_LEVEL", "AMPREWRITE_TRACE", "AMPREWRITE_MAX_STEPS")


@dataclass(frozen=True)
class Config:
    """Where a script trains: a device type and the low-precision dtype of its AMP variants."""

    device: str
    dtype: str

    def variables(self, steps: int) -> dict[str, str]:
        """The environment variables the scripts read."""
        return {"AMPREWRITE_DEVICE": self.device, "AMPREWRITE_DTYPE": self.dtype,
                "BENCH_STEPS": str(steps), "BENCH_SEED": str(SEED)}


def add_device_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", action="append", choices=sorted(DTYPES_BY_DEVICE),
                        help="measure on this device (repeatable; default: cpu, and cuda "
                             "when available)")


def chosen_devices(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[str]:
    """The devices asked for (deduplicated), or the default; exits when CUDA is missing."""
    if not args.device:
        return ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    if "cuda" in args.device and not torch.cuda.is_available():
        built = f"built with CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU build"
        parser.error(f"--device cuda: CUDA is not available (torch {torch.__version__}, {built})")
    return list(dict.fromkeys(args.device))


def configurations(devices: Sequence[str]) -> list[Config]:
    """Every dtype measured on each device."""
    return [Config(device, dtype) for device in devices for dtype in DTYPES_BY_DEVICE[device]]


def rewrite_script(model: str, directory: Path) -> Path:
    """amprewrite's O1 rewrite of `<model>_fp32.py`, written into `directory`."""
    original = SCRIPTS / f"{model}_fp32.py"
    result = rewrite_source(original.read_bytes(), Options(opt_level="O1"))
    if not result.changed:
        raise RuntimeError(f"amprewrite left {original} unchanged")
    path = directory / f"{model}_rewrite.py"
    path.write_bytes(result.source)
    return path


def variant_scripts(model: str, directory: Path) -> dict[str, Path]:
    """The FP32, rewritten and hand-written scripts of `model`, by variant name."""
    return {"fp32": SCRIPTS / f"{model}_fp32.py",
            "rewrite": rewrite_script(model, directory),
            "hand": SCRIPTS / f"{model}_torch_amp.py"}


def run_script(path: Path, config: Config, steps: int) -> dict[str, list[float]]:
    """Run one model script in a fresh interpreter; its step times and losses."""
    env = {key: value for key, value in os.environ.items() if key not in CLEARED}
    completed = subprocess.run([sys.executable, str(path)], env={**env, **config.variables(steps)},
                               capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"{path.name} failed on {config.device} {config.dtype} "
                           f"(exit {completed.returncode}):\n{completed.stderr[-4000:]}")
    return json.loads(completed.stdout.splitlines()[-1])


def run_in_turns(scripts: dict[str, Path], config: Config, steps: int, warmup: int,
                 repeats: int, label: str,
                 environments: dict[str, dict[str, str]] | None = None) -> dict[str, list[Run]]:
    """Each variant's runs: every script's `main()` called `repeats` times in turn, the order
    in round_orders' balanced orders, in one fresh process for `config`.

    One process for all variants: a process's own speed varies by a few percent from one
    start to the next (memory layout, thread pool), more than the differences sought. The
    runtime reads AMPREWRITE_* once per process, so each configuration gets its own.
    `environments` adds variables for one variant's runs (e.g. a trace file)."""
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as worker:
        return worker.submit(_turns, scripts, config, steps, warmup, repeats, label,
                             environments or {}).result()


@dataclass(frozen=True)
class Run:
    """One call of a script's `main()`: its step times (warm-up dropped) and losses."""

    step_times: list[float]
    losses: list[float]

    @property
    def median_ms(self) -> float:
        return median_ms(self.step_times)


def _turns(scripts: dict[str, Path], config: Config, steps: int, warmup: int, repeats: int,
           label: str, environments: dict[str, dict[str, str]]) -> dict[str, list[Run]]:
    os.environ.update(config.variables(steps))
    for variable in CLEARED:
        os.environ.pop(variable, None)
    mains = {variant: runpy.run_path(str(path))["main"] for variant, path in scripts.items()}
    runs: dict[str, list[Run]] = {variant: [] for variant in scripts}
    for index, order in enumerate(orders(list(scripts), repeats), start=1):
        for variant in order:
            extra = environments.get(variant, {})
            os.environ.update(extra)
            try:
                result = mains[variant]()
            finally:
                for variable in extra:
                    os.environ.pop(variable, None)
            run = Run(result["step_times"][warmup:], result["losses"])
            runs[variant].append(run)
            progress(f"{label} round {index}/{repeats} {variant}: {run.median_ms:.3f} ms/step")
    return runs


def median_ms(seconds: Sequence[float]) -> float:
    return statistics.median(seconds) * 1000


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    flags = _cpuinfo("flags").split()
    info: dict[str, Any] = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cpu": _cpuinfo("model name") or platform.processor() or platform.machine(),
        "cpu_bf16_flags": [flag for flag in ("avx512_bf16", "amx_bf16") if flag in flags],
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
    return info


def _cpuinfo(field: str) -> str:
    """The first value of `field` in /proc/cpuinfo ("" where there is none)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() == field:
            return value.strip()
    return ""


def describe(info: dict[str, Any]) -> str:
    """One line about the machine, for the top of a report."""
    gpu = f", {info['gpu']}" if "gpu" in info else ""
    flags = ", ".join(info["cpu_bf16_flags"]) or "no bf16 instructions"
    return (f"{info['date']}: {info['cpu']} ({flags}), {info['cores']} cores, torch "
            f"{info['torch']} with {info['torch_threads']} threads{gpu}")


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> None:
    """A Markdown table; `align` has one letter per column, `l` (left) or `r` (right)."""
    widths = [max(len(row[column]) for row in [headers, *rows]) for column in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        padded = [cell.ljust(width) if side == "l" else cell.rjust(width)
                  for cell, width, side in zip(cells, widths, align, strict=True)]
        return "| " + " | ".join(padded) + " |"

    print(line(headers))
    print(line(["-" * width if side == "l" else "-" * (width - 1) + ":"
                for width, side in zip(widths, align, strict=True)]))
    for row in rows:
        print(line(row))


def write_json(path: Path | None, payload: dict[str, object]) -> None:
    if path is not None:
        path.write_text(json.dumps(payload, indent=2) + "\n")
