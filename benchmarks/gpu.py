"""Issue 27 on a real GPU, in one run: do the rewritten fixtures run on CUDA in float16 and
bfloat16 like FP32, and is amprewrite's rewrite as fast as an expert's hand edit?

    bash benchmarks/gpu.sh                  # on the GPU machine: results under $OUT
    python benchmarks/gpu.py [--budget S] [--out DIR] [--skip-fixtures | --cases C ...]
                             [--units U ...]
    python benchmarks/gpu.py --smoke        # the same code paths on the CPU, tiny, in a minute
    python benchmarks/gpu.py --regenerate   # rewrite gpu_scripts/*_fp32.py (needs amprewrite)

1. Fixtures (benchmarks/gpu_fixtures.py): tests/test_execute.py's rewritten fixtures on CUDA
   in bfloat16 and float16, each against its FP32 input: any crash or drift is reported.
2. Timings (benchmarks/gpu_timing.py, one child process): step time and peak memory of the
   FP32 script, amprewrite's O1 rewrite of it and a hand-written torch.amp version, in the
   same process and alternating order, for the R torch vignette's 3x4096 MLP, a ResNet-50 on
   synthetic 224x224 batches and a GPT-2-small-sized LM (benchmarks/gpu_scripts/), eager and
   under torch.compile (inductor, default mode), in bfloat16 and float16; FP32 runs with
   TF32 on (`torch.set_float32_matmul_precision("high")`), the baseline NVIDIA's AMP
   speedups are measured against. Graph breaks under torch.compile are counted for the
   rewrite and the hand-written version (torch._dynamo's counters).
3. Tables (Markdown, for docs/benchmarks.md) with the date, the GPU and the torch version,
   printed and written to OUT/gpu_table.md, with every number in OUT/gpu.json.

The rewritten scripts are generated here and committed (gpu_scripts/*_rewrite.py), not
rewritten on the GPU machine: that machine reaches no package index and has no libcst, and
the runtime the rewrites import needs only torch, so with the repository and `runtime/` on
PYTHONPATH nothing needs installing there (no wheels to carry, nothing to go stale between
Python versions). tests/test_gpu_benchmark.py fails when a committed rewrite differs from
what amprewrite makes of its FP32 script now (`--regenerate` brings them up to date).

Budget: `--budget` seconds (default 420: with the grace a last unit gets and the start, the run
ends inside 8 minutes) for everything; the timings get what the fixtures leave, trim their rounds to
fit, skip what cannot start in time, and the tables are written for whatever finished
(units in order: eager mlp, resnet50, gpt2 in both dtypes, then compiled, every model in
bfloat16 before any in float16). A child that dies (a CUDA error) loses only the unit it was
in; a new child takes the rest.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO / "runtime"), str(REPO)]

import gpu_report  # noqa: E402
import gpu_timing  # noqa: E402

DEFAULT_BUDGET_S = 420.0
UNITS = gpu_timing.UNITS
GRACE_S = 45.0  # past the deadline, a child still finishing its last dtype is let be


def regenerate() -> list[Path]:
    """Write amprewrite's O1 rewrite of each gpu_scripts/*_fp32.py beside it."""
    from amprewrite.engine import rewrite_source
    from amprewrite.options import Options

    written = []
    for model in gpu_timing.MODELS:
        source = gpu_timing.script_path(model, "fp32").read_bytes()
        target = gpu_timing.script_path(model, "rewrite")
        target.write_bytes(rewrite_source(source, Options(opt_level="O1")).source)
        written.append(target)
    return written


def machine() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__, "python": platform.python_version(),
        "cuda": torch.version.cuda, "device": "cpu",
    }
    if torch.cuda.is_available():
        info["device"] = torch.cuda.get_device_name()
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
    return info


def run_fixtures(smoke: bool, names: list[str] | None) -> list[dict[str, Any]]:
    import gpu_fixtures

    started = time.time()
    checks = gpu_fixtures.check_cases(gpu_fixtures.selected(smoke, names),
                                      "cpu" if smoke else "cuda")
    print(f"fixtures: {len(checks)} checks in {time.time() - started:.0f} s", flush=True)
    return [{**check.__dict__, "relative": check.relative} for check in checks]


def run_timings(units: list[str], deadline: float, results: Path, smoke: bool) -> None:
    """Children of gpu_timing.py until every unit has run or the deadline has passed."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "runtime"), str(REPO),
                                          os.environ.get("PYTHONPATH", "")])}
    left = list(units)
    while left and time.time() < deadline:
        command = [sys.executable, str(HERE / "gpu_timing.py"), str(results), str(deadline),
                   *left, *(["--smoke"] if smoke else [])]
        try:
            code = subprocess.run(command, env=env, check=False,
                                  timeout=max(1.0, deadline - time.time() + GRACE_S)).returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
        records = gpu_report.read(results)
        ended = {r["unit"] for r in records if r["kind"] in ("end", "skipped")}
        started = [r["unit"] for r in records if r["kind"] == "start"]
        if code != 0 and started and started[-1] not in ended:  # that unit killed the child
            crashed = started[-1]
            with results.open("a", encoding="utf-8") as out:
                out.write(json.dumps({"kind": "crashed", "unit": crashed, "code": code}) + "\n")
            ended.add(crashed)
        left = [unit for unit in left if unit not in ended]
        if code != 0:
            print(f"timing child ended with {code}; left: {left}", flush=True)
    skipped = {r["unit"] for r in gpu_report.read(results) if r["kind"] == "skipped"}
    with results.open("a", encoding="utf-8") as out:
        for unit in left:
            if unit not in skipped:
                out.write(json.dumps({"kind": "skipped", "unit": unit, "why": "budget"}) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S,
                        help="seconds for the whole run (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu-out"),
                        help="where results go (default: $OUT, else ./gpu-out)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes on the CPU: check the code paths, measure nothing")
    parser.add_argument("--skip-fixtures", action="store_true")
    parser.add_argument("--cases", nargs="+", metavar="CASE",
                        help="only these fixture cases (`trainer_class`, `trainer_class-O1`)")
    parser.add_argument("--units", nargs="+", choices=UNITS, default=UNITS)
    parser.add_argument("--regenerate", action="store_true",
                        help="rewrite gpu_scripts/*_fp32.py into *_rewrite.py and stop")
    args = parser.parse_args()
    if args.regenerate:
        for path in regenerate():
            print(path)
        return 0
    deadline = time.time() + args.budget
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "timings.jsonl"
    results.unlink(missing_ok=True)
    info = {**machine(), "smoke": args.smoke, "budget_s": args.budget}
    if not args.smoke and info["device"] == "cpu":
        parser.error("no CUDA device: use --smoke on a machine without a GPU")
    print(f"{info['date']} {info['device']} torch {info['torch']} CUDA {info['cuda']}",
          flush=True)
    checks = [] if args.skip_fixtures else run_fixtures(args.smoke, args.cases)
    print(write_report(args.out, info, checks, results), flush=True)  # should the rest die
    run_timings(args.units, deadline, results, args.smoke)
    print(write_report(args.out, info, checks, results), flush=True)
    return 0


def write_report(out: Path, info: dict[str, Any], checks: list[dict[str, Any]],
                 results: Path) -> str:
    """Write gpu.json and gpu_table.md for what has finished; the table."""
    report = gpu_report.build(info, checks, gpu_report.read(results))
    (out / "gpu.json").write_text(json.dumps(report, indent=2) + "\n")
    table = gpu_report.markdown(report)
    (out / "gpu_table.md").write_text(table)
    return table


if __name__ == "__main__":
    sys.exit(main())
