"""Trust on unseen code: does each corpus script still train after the O1 rewrite?

    python benchmarks/trust_corpus.py [--jobs N] [--json OUT.json] [--corpus DIR] [NAMES...]

Each script of `benchmarks/trust_corpus/` (NAMES: file stems or unique prefixes such as `04`;
all by default) runs as written (FP32) on the CPU, is rewritten by amprewrite at O1 (findings
kept), and the rewrite runs once per mode of `MODES`: bfloat16 (the runtime's CPU default),
float16 with dynamic loss scaling (`AMPREWRITE_DTYPE=float16`, the CUDA path, with CUDA's
defaults and its refusal of binary cross-entropy under autocast: see `tests/_bootstrap.py`),
and, where `tests.execution.run_script` accepts `overflow_at`, float16 with an inf injected
into one gradient so skipped steps and skip branches really run. Every run is classified:

* trains: finishes, saw a low-precision Linear/Conv output while training, and the mean of its
  last losses is within the script's tolerance of FP32's (of its FP32 twin where the float16
  run skipped steps for inf/NaN gradients: the FP32 run that skips the same steps, see
  `tests/execution.py`);
* diverges: finishes, but the losses are off (or not finite);
* crashes: raises (the exception's last line is kept);
* stays FP32: the rewrite changed nothing or no training forward ran in low precision; the
  findings that explain it are listed, or "without a word" when there are none.

Recurrent models (nn.LSTM/GRU/RNN) run in bfloat16 only: this CPU's oneDNN has no float16
LSTM/GRU kernel ("could not create a primitive descriptor for the LSTM").
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
CORPUS_DIR = REPO_ROOT / "benchmarks" / "trust_corpus"
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from amprewrite.catalog import Severity  # noqa: E402
from amprewrite.engine import RewriteError, rewrite_source  # noqa: E402
from amprewrite.findings import Finding  # noqa: E402
from amprewrite.options import Options  # noqa: E402
from tests.execution import BFLOAT16, FLOAT16, FLOAT16_ENV, ScriptRun, run_script  # noqa: E402

TRAINS, DIVERGES, CRASHES, STAYS_FP32, NOT_JUDGED = (
    "trains", "diverges", "crashes", "stays FP32", "not judged")
OVERFLOW_AT = 3  # the step whose gradient gets an inf in the overflow mode
TAIL = 3  # losses averaged at the end of a run to compare it with FP32
THREADS = "1"  # torch threads per run: runs go in parallel (--jobs), one core each
RECURRENT = re.compile(r"\bnn\.(LSTM|GRU|RNN)\b|\b(LSTM|GRU|RNN)\(")


@dataclass(frozen=True)
class Tolerance:
    """How far the mean of the last losses may be from FP32's: |amp - fp32| <= abs + rel*|fp32|."""

    rel: float = 0.05
    abs: float = 0.01
    why: str = "bfloat16 keeps ~3 significant digits; 10-30 steps drift a little"


DEFAULT_TOLERANCE = Tolerance()
# Scripts whose loss depends on sampled trajectories or an adversarial game: the low-precision
# run takes other actions / other generator samples, so only the loss's scale is comparable.
TOLERANCES = {
    "01_reinforce_corridor": Tolerance(0.5, 1.0, "sampled episodes differ from FP32's"),
    "02_actor_critic": Tolerance(0.5, 0.5, "sampled episodes differ from FP32's"),
    "03_dqn_replay": Tolerance(0.5, 0.05, "epsilon-greedy transitions differ from FP32's"),
    "04_gan_bce": Tolerance(0.3, 0.1, "adversarial game: both players drift"),
    "05_wgan_clip": Tolerance(0.5, 0.1, "adversarial game: both players drift"),
    "06_wgan_gp": Tolerance(0.5, 0.5, "adversarial game and a gradient penalty"),
    "07_cgan_lsgan": Tolerance(0.3, 0.1, "adversarial game: both players drift"),
}


@dataclass(frozen=True)
class Mode:
    """One way to run the rewrite: environment and extra run_script keywords."""

    name: str
    dtype: str  # the low-precision dtype the training forward must show
    env: tuple[tuple[str, str], ...]
    run_kwargs: tuple[tuple[str, object], ...] = ()
    recurrent_ok: bool = True  # can a recurrent model run in this mode on this CPU?


def available_modes() -> list[Mode]:
    """bfloat16, float16 and, when the harness supports it, float16 with an injected overflow."""
    float16 = tuple(sorted(FLOAT16_ENV.items()))  # with CUDA's defaults and its BCE refusal
    modes = [
        Mode("bfloat16", BFLOAT16, (("AMPREWRITE_DTYPE", "bfloat16"),)),
        Mode("float16", FLOAT16, float16, recurrent_ok=False),
    ]
    if "overflow_at" in inspect.signature(run_script).parameters:
        modes.append(Mode("float16+overflow", FLOAT16, float16,
                          (("overflow_at", OVERFLOW_AT),), recurrent_ok=False))
    return modes


@dataclass
class Verdict:
    """What one mode of one script did."""

    status: str
    detail: str = ""
    final_fp32: float | None = None
    final_amp: float | None = None
    trace: str = ""  # a crash's last traceback lines (where in the rewritten script, and what)


@dataclass
class ScriptReport:
    """Everything learnt about one corpus script."""

    name: str
    recurrent: bool
    changed: bool = False
    findings: list[str] = field(default_factory=list)
    fp32_error: str | None = None
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    rewritten: str = ""  # the rewritten source (for failure reports)


def corpus_scripts(names: Sequence[str] = (), directory: Path = CORPUS_DIR) -> list[Path]:
    """The corpus scripts, all or those whose stem equals or starts with one of `names`."""
    scripts = sorted(directory.glob("[0-9]*.py"))
    if not names:
        return scripts
    chosen = [s for s in scripts if any(s.stem == n or s.stem.startswith(n) for n in names)]
    missing = [n for n in names if not any(s.stem == n or s.stem.startswith(n) for s in scripts)]
    if missing:
        raise SystemExit(f"no corpus script named {', '.join(missing)}")
    return chosen


def is_recurrent(source: str) -> bool:
    return RECURRENT.search(source) is not None


def explaining(findings: Iterable[Finding]) -> list[str]:
    """Findings that say why a site was left alone (not those that report a change)."""
    return [f"{f.code} line {f.line}: {f.message}" for f in findings
            if f.severity is not Severity.CHANGE]


def last_line(error: str | None) -> str:
    lines = [line for line in (error or "").strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no traceback"


def traceback_tail(error: str | None, frames: int = 3) -> str:
    """The last `frames` frames of a traceback (file, line, code) and the exception line."""
    lines = [line.rstrip() for line in (error or "").splitlines()
             if line.strip() and set(line.strip()) != {"^"}]
    starts = [i for i, line in enumerate(lines) if line.lstrip().startswith("File ")]
    return "\n".join(lines[starts[-frames]:] if len(starts) >= frames else lines[-6:])


def tail_mean(losses: Sequence[float]) -> float:
    tail = list(losses[-TAIL:])
    return sum(tail) / len(tail)


def classify(fp32: ScriptRun, amp: ScriptRun, mode: Mode, changed: bool, explanation: list[str],
             tolerance: Tolerance = DEFAULT_TOLERANCE) -> Verdict:
    """Judge one rewritten run against the FP32 run of the same script."""
    why = "; ".join(explanation) if explanation else "without a word"
    if not changed:
        return Verdict(STAYS_FP32, f"rewrite changed nothing: {why}")
    if not amp.ok:
        if amp.timed_out:
            return Verdict(CRASHES, "timed out")
        error = amp.error or amp.stderr
        return Verdict(CRASHES, last_line(error), trace=traceback_tail(error))
    if mode.dtype not in amp.train_dtypes:
        return Verdict(STAYS_FP32, f"no {mode.name} training forward seen: {why}")
    if not amp.losses or not fp32.losses:
        return Verdict(DIVERGES, "no loss recorded")
    final_fp32, final_amp = tail_mean(fp32.losses), tail_mean(amp.losses)
    if not all(math.isfinite(x) for x in amp.losses[-TAIL:]):
        return Verdict(DIVERGES, "non-finite final losses", final_fp32, final_amp)
    if abs(final_amp - final_fp32) <= tolerance.abs + tolerance.rel * abs(final_fp32):
        return Verdict(TRAINS, "", final_fp32, final_amp)
    return Verdict(DIVERGES, f"final loss {final_amp:.4g} vs FP32 {final_fp32:.4g} "
                   f"(tolerance rel {tolerance.rel}, abs {tolerance.abs})", final_fp32, final_amp)


# One rewrite at a time: the engine is not thread-safe (the command gives each file a process
# of its own), and the scripts' runs are what the threads are for. CPython 3.11's `ast` keeps
# its converter's recursion counter per interpreter, so two threads parsing at once can fail
# with "SystemError: AST constructor recursion depth mismatch" (seen in CI).
_REWRITING = threading.Lock()


def rewrite(source: bytes) -> tuple[bytes, bool, list[Finding]]:
    """The O1 rewrite of `source` with its findings; unchanged with the finding on failure."""
    try:
        with _REWRITING:
            result = rewrite_source(source, Options(opt_level="O1"))
    except RewriteError as exc:
        return source, False, [exc.finding]
    return result.source, result.changed, result.findings


def run_env(mode: Mode | None) -> dict[str, str]:
    env = {"AMPREWRITE_TEST_THREADS": THREADS, "OMP_NUM_THREADS": THREADS}
    if mode is not None:
        env.update(dict(mode.env))
    return env


def run_mode(script: Path, mode: Mode) -> ScriptRun:
    return run_script(script, env=run_env(mode), **dict(mode.run_kwargs))


def judge_script(path: Path, modes: Sequence[Mode]) -> ScriptReport:
    """Run one script FP32 and rewritten in every mode (sequentially) and judge each run."""
    source = path.read_bytes()
    report = ScriptReport(path.stem, is_recurrent(source.decode("utf-8")))
    new_source, report.changed, findings = rewrite(source)
    report.findings = [f"{f.code} line {f.line}: {f.message}" for f in findings]
    report.rewritten = new_source.decode("utf-8")
    tolerance = TOLERANCES.get(path.stem, DEFAULT_TOLERANCE)
    with tempfile.TemporaryDirectory(prefix=f"trust-{path.stem}-") as tmp:
        original = Path(tmp) / path.name  # scripts write plots and checkpoints into their cwd
        shutil.copyfile(path, original)
        rewritten = Path(tmp) / f"{path.stem}_O1.py"
        rewritten.write_bytes(new_source)
        fp32 = run_script(original, env=run_env(None))
        if not fp32.ok:
            report.fp32_error = last_line(fp32.error or fp32.stderr)
            return report
        twins = {(): fp32}  # FP32 runs that skip the steps a float16 run skipped
        for mode in modes:
            if report.recurrent and not mode.recurrent_ok:
                report.verdicts[mode.name] = Verdict(
                    NOT_JUDGED, "recurrent: no float16 LSTM/GRU kernel on this CPU's oneDNN")
                continue
            amp = run_mode(rewritten, mode)
            skipped = tuple(amp.skipped_at) if amp.ok else ()
            if skipped not in twins:
                twins[skipped] = run_script(original, env=run_env(None), skip_at=skipped)
            report.verdicts[mode.name] = classify(twins[skipped], amp, mode, report.changed,
                                                  explaining(findings), tolerance)
    return report


def judge_corpus(paths: Sequence[Path], modes: Sequence[Mode], jobs: int = 1) -> list[ScriptReport]:
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(lambda p: judge_script(p, modes), paths))


def table(reports: Sequence[ScriptReport], modes: Sequence[Mode]) -> str:
    header = "| script | " + " | ".join(m.name for m in modes) + " |"
    lines = [header, "| --- |" + " --- |" * len(modes)]
    for r in reports:
        if r.fp32_error:
            cells = [f"FP32 run fails: {r.fp32_error}"] * len(modes)
        else:
            cells = [_cell(r.verdicts[m.name]) for m in modes]
        lines.append(f"| {r.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(verdict: Verdict) -> str:
    if verdict.status == TRAINS:
        return f"trains ({verdict.final_amp:.4g} vs {verdict.final_fp32:.4g})"
    if verdict.status == NOT_JUDGED:
        return "bfloat16 only (recurrent)"
    return verdict.status


def failures(reports: Sequence[ScriptReport]) -> str:
    out = []
    for r in reports:
        for mode, v in r.verdicts.items():
            if v.status not in (TRAINS, NOT_JUDGED):
                out.append(f"- {r.name} [{mode}] {v.status}: {v.detail}")
                if v.trace:
                    out.append("    " + v.trace.replace("\n", "\n    "))
    return "\n".join(out)


def summary(reports: Sequence[ScriptReport], modes: Sequence[Mode]) -> str:
    total = len(reports)
    counts = {m.name: sum(1 for r in reports if _status(r, m) == TRAINS) for m in modes}
    judged = {m.name: sum(1 for r in reports if _status(r, m) != NOT_JUDGED) for m in modes}
    text = f"{counts['bfloat16']} of {total} scripts train in bfloat16"
    for m in modes[1:]:
        text += f", {counts[m.name]} in {m.name}"
        if judged[m.name] != total:
            skipped = total - judged[m.name]
            text += f" (of {judged[m.name]}; {skipped} recurrent judged in bfloat16 only)"
    return text


def _status(report: ScriptReport, mode: Mode) -> str:
    if report.fp32_error:
        return CRASHES
    return report.verdicts[mode.name].status


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="script stems or prefixes (default: all)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", type=Path, help="write every verdict and finding here")
    parser.add_argument("--corpus", type=Path, default=CORPUS_DIR,
                        help="another folder of numbered scripts (default: the trust corpus)")
    parser.add_argument("--show-failures", action="store_true",
                        help="also print the findings of each failing script")
    args = parser.parse_args(argv)
    modes = available_modes()
    reports = judge_corpus(corpus_scripts(args.names, args.corpus), modes, args.jobs)
    print(table(reports, modes))
    print()
    failing = failures(reports)
    if failing:
        print("Failures:\n" + failing + "\n")
    if args.show_failures:
        for r in reports:
            if any(v.status not in (TRAINS, NOT_JUDGED) for v in r.verdicts.values()):
                print(f"## {r.name}\n" + "\n".join(r.findings) + "\n")
    print(summary(reports, modes))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in reports], indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
