"""Runtime overhead: the step time of a tiny model trained through amprewrite_runtime (the O1
rewrite of scripts/tiny_mlp_fp32.py) against the same model with torch.amp written by hand
(scripts/tiny_mlp_torch_amp.py), in the same dtype: bfloat16 on the CPU, float16 on CUDA.

    python benchmarks/overhead.py [--device cpu|cuda ...] [--steps N] [--warmup N]
                                  [--repeats N] [--json OUT.json]

The model is so small (a step is well under a millisecond on a CPU) that what the runtime adds
per step, a few Python calls in `autocast()` and the scaler's methods, is as visible as it can
be. Target: median step time rewrite / hand <= 1.02, with tracing off (AMPREWRITE_TRACE unset,
the default: each scaler hook then costs one attribute check). The rewrite with
AMPREWRITE_TRACE set is measured too, to show what tracing costs when it is on.

Measured in-process: the differences sought are microseconds, so both training loops (each
script's `main()`) run in one interpreter, alternating blocks of `--steps` steps, in
round_orders' balanced orders, so that both see the same process, allocator, thread pool and
machine state; a process per block would add its own variance and seconds of start-up. Each device
runs in a fresh spawned process, as the runtime reads AMPREWRITE_DEVICE/_DTYPE once per
process. The first `--warmup` steps of each block are dropped.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import _harness as h

VARIANTS = ("rewrite", "traced", "hand")  # traced: the rewrite with AMPREWRITE_TRACE set
TARGET = 1.02


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    h.add_device_option(parser)
    parser.add_argument("--steps", type=int, default=1000, help="steps per block (default: 1000)")
    parser.add_argument("--warmup", type=int, default=100,
                        help="steps dropped at the start of each block (default: 100)")
    parser.add_argument("--repeats", type=int, default=10, help="rounds of blocks (default: 10)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    devices = h.chosen_devices(parser, args)
    if not 0 <= args.warmup < args.steps or args.repeats < 1:
        parser.error("need 0 <= --warmup < --steps and --repeats >= 1")

    info = h.machine()
    print(h.describe(info))
    results = []
    with tempfile.TemporaryDirectory() as directory:
        rewritten = h.rewrite_script("tiny_mlp", Path(directory))
        for device in devices:
            config = h.Config(device, h.DTYPES_BY_DEVICE[device][0])
            scripts = {"rewrite": rewritten, "traced": rewritten,
                       "hand": h.SCRIPTS / "tiny_mlp_torch_amp.py"}
            trace = {"traced": {"AMPREWRITE_TRACE": str(Path(directory) / "trace.jsonl")}}
            runs = h.run_in_turns(scripts, config, args.steps, args.warmup, args.repeats,
                                  f"{device} {config.dtype}", trace)
            median = {variant: h.median_ms([t for run in runs[variant] for t in run.step_times])
                      for variant in VARIANTS}
            ratio = median["rewrite"] / median["hand"]
            results.append({"device": device, "dtype": config.dtype, "steps": args.steps,
                            "warmup": args.warmup, "repeats": args.repeats, "median_ms": median,
                            "rewrite_over_hand": ratio, "target_met": ratio <= TARGET,
                            "traced_over_hand": median["traced"] / median["hand"]})

    h.print_table(
        ["device", "dtype", "hand us", "rewrite us", "rewrite/hand", f"<= {TARGET}",
         "traced us", "traced/hand"],
        [[r["device"], r["dtype"], f"{r['median_ms']['hand'] * 1000:.1f}",
          f"{r['median_ms']['rewrite'] * 1000:.1f}", f"{r['rewrite_over_hand']:.3f}",
          "yes" if r["target_met"] else "NO", f"{r['median_ms']['traced'] * 1000:.1f}",
          f"{r['traced_over_hand']:.3f}"] for r in results],
        align="llrrrlrr")
    h.write_json(args.json, {"benchmark": "overhead", "machine": info, "results": results})


if __name__ == "__main__":
    main()
