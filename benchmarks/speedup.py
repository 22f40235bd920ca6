"""Speedup delivered: step time of amprewrite's O1 rewrite of an FP32 training script, against
the FP32 script itself and against the same script made mixed-precision by hand with torch.amp.

    python benchmarks/speedup.py [--models mlp cnn lm] [--device cpu|cuda ...] [--steps N]
                                 [--warmup N] [--repeats N] [--json OUT.json]

Models (scripts/<model>_fp32.py and _torch_amp.py): the MLP of the R torch AMP article, a small
CNN and a small transformer LM. Devices: the CPU in bfloat16, and CUDA in float16 and in
bfloat16 when available. The three scripts' `main()`s run in one process per device and
dtype, `--repeats` rounds of the three in turn (in round_orders' balanced orders) to cancel
machine drift: a process's own speed varies by a few percent from start to start, more than
the differences sought. The first `--warmup` steps of each run are dropped and the other step
times of a variant pooled: its median is the variant's step time. Targets: rewrite speedup /
hand speedup >= 0.98, and for the MLP on the CPU a speedup of at least 1.7x.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import _harness as h

MODELS = ("mlp", "cnn", "lm")
DEFAULT_STEPS = {"cpu": 20, "cuda": 200}
DEFAULT_WARMUP = {"cpu": 3, "cuda": 20}
RATIO_TARGET = 0.98
MLP_CPU_TARGET = 1.7


def measure(scripts: dict[str, Path], config: h.Config, steps: int, warmup: int,
            repeats: int, label: str) -> dict[str, Any]:
    """Median step times of the three variants, their speedups and each run's numbers."""
    runs = h.run_in_turns(scripts, config, steps, warmup, repeats, label)
    median = {variant: h.median_ms([t for run in runs[variant] for t in run.step_times])
              for variant in h.VARIANTS}
    rewrite_speedup = median["fp32"] / median["rewrite"]
    hand_speedup = median["fp32"] / median["hand"]
    return {"median_ms": median, "rewrite_speedup": rewrite_speedup,
            "hand_speedup": hand_speedup, "ratio": rewrite_speedup / hand_speedup,
            "runs": {variant: [{"median_ms": run.median_ms, "step_times": run.step_times,
                                "final_loss": run.losses[-1]} for run in variant_runs]
                     for variant, variant_runs in runs.items()}}


def targets(model: str, config: h.Config, ratio: float, speedup: float) -> dict[str, bool]:
    """The targets of one row (rewrite/hand `ratio`, rewrite `speedup`), each with whether
    it is met."""
    met = {f"rewrite/hand >= {RATIO_TARGET}": ratio >= RATIO_TARGET}
    if model == "mlp" and config.device == "cpu":
        met[f"speedup >= {MLP_CPU_TARGET}x"] = speedup >= MLP_CPU_TARGET
    return met


def run_length(args: argparse.Namespace, device: str) -> tuple[int, int]:
    """Steps per run and warm-up steps dropped, as asked or the device's defaults."""
    steps = DEFAULT_STEPS[device] if args.steps is None else args.steps
    warmup = DEFAULT_WARMUP[device] if args.warmup is None else args.warmup
    return steps, warmup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    h.add_device_option(parser)
    parser.add_argument("--steps", type=int, help="steps per run (default: 20 on the CPU, "
                                                  "200 on CUDA)")
    parser.add_argument("--warmup", type=int, help="steps dropped at the start of each run "
                                                   "(default: 3 on the CPU, 20 on CUDA)")
    parser.add_argument("--repeats", type=int, default=8,
                        help="rounds of the three variants (default: 8)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    devices = h.chosen_devices(parser, args)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    for device in devices:
        steps, warmup = run_length(args, device)
        if not 0 <= warmup < steps:
            parser.error(f"--warmup ({warmup}) must be at least 0 and less than --steps ({steps})")

    info = h.machine()
    print(h.describe(info))
    results = []
    with tempfile.TemporaryDirectory() as directory:
        scripts = {model: h.variant_scripts(model, Path(directory)) for model in args.models}
        for config in h.configurations(devices):
            steps, warmup = run_length(args, config.device)
            for model in args.models:
                label = f"{model} {config.device} {config.dtype}"
                result = measure(scripts[model], config, steps, warmup, args.repeats, label)
                results.append({"model": model, "device": config.device, "dtype": config.dtype,
                                "steps": steps, "warmup": warmup, "repeats": args.repeats,
                                **result, "targets": targets(model, config, result["ratio"],
                                                             result["rewrite_speedup"])})

    h.print_table(
        ["model", "device", "dtype", "fp32 ms", "rewrite ms", "hand ms", "rewrite x", "hand x",
         "rewrite/hand", "targets"],
        [[r["model"], r["device"], r["dtype"],
          *(f"{r['median_ms'][variant]:.2f}" for variant in h.VARIANTS),
          f"{r['rewrite_speedup']:.2f}", f"{r['hand_speedup']:.2f}", f"{r['ratio']:.3f}",
          "; ".join(f"{target}: {'yes' if met else 'NO'}" for target, met in r["targets"].items())]
         for r in results],
        align="lllrrrrrrl")
    h.write_json(args.json, {"benchmark": "speedup", "machine": info, "results": results})


if __name__ == "__main__":
    main()
