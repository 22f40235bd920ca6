"""`amprewrite compare [--steps N] [--plot FILE.png] -- COMMAND...`: FP32 against AMP.

Runs COMMAND (a training script rewritten by amprewrite) twice through the runtime's
environment: once as FP32 (`AMPREWRITE_OPT_LEVEL=O0`), once at the script's own opt level,
each stopped after N optimizer steps (`AMPREWRITE_MAX_STEPS`) and traced to a JSON-lines file
(`AMPREWRITE_TRACE`, see `amprewrite_runtime.trace`), then prints both side by side. Never
imports torch: the script runs in a subprocess.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import statistics
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

ENV_OPT_LEVEL = "AMPREWRITE_OPT_LEVEL"
ENV_TRACE = "AMPREWRITE_TRACE"
ENV_MAX_STEPS = "AMPREWRITE_MAX_STEPS"
ENV_SEED = "AMPREWRITE_SEED"  # the runtime seeds Python, NumPy and torch with it at import
DEFAULT_TOLERANCE = 0.10
STDERR_TAIL_LINES = 20


class CompareError(click.ClickException):
    """A message and an exit status (1: a run went wrong, 2: usage); no traceback."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click declares it on the class


@dataclass(frozen=True)
class Run:
    """The trace of one run: one record per optimizer step."""

    label: str
    records: list[dict[str, Any]]

    @property
    def losses(self) -> dict[int, float]:
        return {r["step"]: r["loss"] for r in self.records if r["loss"] is not None}

    @property
    def final_loss(self) -> float | None:
        return next((r["loss"] for r in reversed(self.records) if r["loss"] is not None), None)

    @property
    def iteration_times(self) -> list[float]:
        """Each iteration's wall time (its last record's); the first, which leaves out its
        forward pass and holds the warm-up, is dropped when there are others."""
        times = {r["iteration"]: r["time_s"] for r in self.records}
        return list(times.values())[1:] if len(times) > 1 else list(times.values())

    @property
    def median_time(self) -> float:
        return statistics.median(self.iteration_times)

    def setting(self, key: str) -> str:
        return "/".join(sorted({str(r[key]) for r in self.records}))


@dataclass(frozen=True)
class Divergence:
    """|AMP loss - FP32 loss| over the steps where both are finite."""

    steps: int
    max_abs: float
    max_abs_step: int
    final_abs: float
    max_rel: float
    max_rel_step: int
    final_rel: float


def divergence(fp32: Run, amp: Run) -> Divergence | None:
    """Absolute and relative (to FP32) loss differences; None when no step compares."""
    reference, other = fp32.losses, amp.losses
    steps = [s for s in sorted(reference.keys() & other.keys())
             if math.isfinite(reference[s]) and math.isfinite(other[s])]
    if not steps:
        return None
    absolute = {s: abs(other[s] - reference[s]) for s in steps}
    relative = {s: _ratio(absolute[s], abs(reference[s])) for s in steps}
    max_abs_step = max(steps, key=absolute.__getitem__)
    max_rel_step = max(steps, key=relative.__getitem__)
    return Divergence(len(steps), absolute[max_abs_step], max_abs_step, absolute[steps[-1]],
                      relative[max_rel_step], max_rel_step, relative[steps[-1]])


def verdict(fp32: Run, amp: Run, tolerance: float) -> str | None:
    """Why the AMP run does not train like the FP32 one (None: it does): a non-finite loss
    where FP32's is finite, no step to compare, or a late loss (the mean over the last
    quarter of the steps, at least one) off FP32's by more than `tolerance`, relatively."""
    reference, other = fp32.losses, amp.losses
    steps = sorted(reference.keys() & other.keys())
    broken = [s for s in steps if math.isfinite(reference[s]) and not math.isfinite(other[s])]
    if broken:
        return f"the AMP loss is not finite at step {broken[0]}, where FP32's is"
    finite = [s for s in steps if math.isfinite(reference[s])]
    if not finite:
        return "no step has a finite loss in both runs"
    late = finite[-max(1, len(finite) // 4):]
    fp32_late = sum(reference[s] for s in late) / len(late)
    amp_late = sum(other[s] for s in late) / len(late)
    off = _ratio(abs(amp_late - fp32_late), abs(fp32_late))
    if off > tolerance:
        return (f"the AMP loss over the last {len(late)} steps is {off:.1%} off FP32's "
                f"(mean {amp_late:.6g} against {fp32_late:.6g}; the tolerance is "
                f"{tolerance:.1%})")
    return None


def _ratio(numerator: float, denominator: float) -> float:
    if denominator == 0:
        return 0.0 if numerator == 0 else math.inf
    return numerator / denominator


def run_traced(command: Sequence[str], label: str, env: dict[str, str], steps: int) -> Run:
    """Run `command` with a trace file and a step budget; its records, or a CompareError."""
    with tempfile.TemporaryDirectory(prefix="amprewrite-compare-") as directory:
        trace = Path(directory) / "trace.jsonl"
        env = {**env, ENV_TRACE: str(trace), ENV_MAX_STEPS: str(steps)}
        try:
            done = subprocess.run(list(command), env=env, capture_output=True, text=True,
                                  errors="replace", check=False)
        except OSError as exc:
            raise CompareError(f"cannot run {command[0]!r}: {exc.strerror or exc}", 2) from exc
        if done.returncode != 0:
            output = (done.stderr or done.stdout).rstrip().splitlines()
            tail = "\n".join(output[-STDERR_TAIL_LINES:])
            raise CompareError(f"the {label} run of `{_shell(command)}` failed with exit status "
                               f"{done.returncode}; the end of its output:\n{tail}")
        records = _read_trace(trace, label)
    if not records:
        raise CompareError(
            f"the {label} run of `{_shell(command)}` exited normally but wrote no trace: it "
            "never stepped an optimizer through amprewrite_runtime's GradScaler, nor built a "
            "framework (Accelerate, Lightning, the Hugging Face Trainer) through the switch "
            "amprewrite writes (`accelerate_mixed_precision()`, `lightning_precision()`, "
            "`mixed_precision_flag(...)`). Is it a script rewritten by amprewrite (not with "
            "--plain, which uses torch.amp only)? A framework switch an earlier amprewrite "
            "wrote (`prefers_bfloat16()`) is not traced: run `amprewrite --opt-level O0`, then "
            "`amprewrite` on the file, and compare again.")
    return Run(label, records)


def _read_trace(path: Path, label: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    except ValueError as exc:
        raise CompareError(f"the {label} run wrote an unreadable trace: {exc}") from exc


def _shell(command: Sequence[str]) -> str:
    return shlex.join(command)


RUNTIME_MODULE = b"amprewrite_runtime"


def refuse_before_running(command: Sequence[str]) -> None:
    """Fail fast, with the fix, on a command that cannot give a trace: a script named as
    the command (`compare train.py`), or a script that does not use the runtime (not
    rewritten, or rewritten with --plain), which would otherwise train to the end twice."""
    from amprewrite.compare_notebooks import is_notebook_path, kernel_run_problem

    if is_notebook_path(command):
        if RUNTIME_MODULE not in _read(Path(command[0])):
            raise CompareError(f"`{command[0]}` does not import amprewrite_runtime, so neither "
                               "run would be traced: rewrite it first with `amprewrite "
                               f"{shlex.quote(command[0])}` (not --plain), then compare again",
                               2)
        return
    problem = kernel_run_problem(command)
    if problem is not None:
        raise CompareError(problem, 2)
    program = Path(command[0])
    if program.is_file() and not os.access(program, os.X_OK):
        raise CompareError(f"`{command[0]}` is a file, not a command: run it with Python, "
                           f"`amprewrite compare -- python {_shell(command)}`", 2)
    script = next((Path(a) for a in command[1:] if a.endswith(".py") and Path(a).is_file()),
                  None)
    if script is not None and not _uses_runtime(script):
        raise CompareError(
            f"`{script}` does not import amprewrite_runtime (nor does a module of its "
            "directory that it imports), so neither run would be traced: rewrite it first with "
            f"`amprewrite {shlex.quote(str(script))}` (not --plain, which uses torch.amp only), "
            "then compare again", 2)


def _uses_runtime(script: Path) -> bool:
    """Whether the script, or a module next to it that it imports (transitively: a rewritten
    trainer module), imports the runtime."""
    pending, seen = [script.resolve()], set()
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        source = _read(path)
        if RUNTIME_MODULE in source:
            return True
        pending += _local_imports(source, script.resolve().parent)
    return False


def _local_imports(source: bytes, directory: Path) -> list[Path]:
    """The files under `directory` of the modules `source` imports (`a.b`: a/b.py,
    a/b/__init__.py and a/__init__.py)."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    names = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
             for alias in node.names]
    names += [node.module for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module and not node.level]
    files = []
    for name in names:
        parts = name.split(".")
        for end in range(1, len(parts) + 1):
            base = directory.joinpath(*parts[:end])
            files += [f for f in (base.with_suffix(".py"), base / "__init__.py") if f.is_file()]
    return files


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def report(fp32: Run, amp: Run) -> str:
    """The side-by-side table, the loss per step, the loss scale's history, the speedup."""
    rows = [
        ("", fp32.label, amp.label),
        ("opt level", fp32.setting("opt_level"), amp.setting("opt_level")),
        ("dtype", fp32.setting("dtype"), amp.setting("dtype")),
        ("device", fp32.setting("device"), amp.setting("device")),
        ("steps", str(len(fp32.records)), str(len(amp.records))),
        ("final loss", _number(fp32.final_loss), _number(amp.final_loss)),
        ("non-finite losses", _non_finite(fp32), _non_finite(amp)),
        ("skipped steps", _skipped(fp32), _skipped(amp)),
        ("loss scale first/min/last", _scales(fp32), _scales(amp)),
        ("median step time", _milliseconds(fp32.median_time), _milliseconds(amp.median_time)),
    ]
    lines = _table(rows)
    found = divergence(fp32, amp)
    if found is None:
        lines.append("loss divergence: no step with a finite loss in both runs")
    else:
        lines += ["", "loss per step:", *_indented(_table(_loss_rows(fp32, amp))), "",
                  f"loss divergence over {found.steps} steps (|AMP - FP32|, relative to FP32):",
                  f"  max abs    {found.max_abs:.3g} (step {found.max_abs_step})",
                  f"  final abs  {found.final_abs:.3g}",
                  f"  max rel    {found.max_rel:.2%} (step {found.max_rel_step})",
                  f"  final rel  {found.final_rel:.2%}"]
    lines.append(f"loss scale history ({amp.label}): {_scale_history(amp)}")
    if amp.setting("opt_level") == "O0":
        lines.append(f"the {amp.label} run trained in FP32 too (opt level O0): the script's "
                     "own setting chose it, or a framework's launcher or config "
                     "(ACCELERATE_MIXED_PRECISION from `accelerate launch --mixed_precision` or "
                     "Accelerate's config, LT_PRECISION from `fabric run --precision`), which "
                     "wins over the switch amprewrite wrote")
    speedup = _ratio(fp32.median_time, amp.median_time)
    lines.append(f"speedup (FP32 median / AMP median step time): {speedup:.2f}x")
    lines += device_notes(amp, speedup)
    return "\n".join(lines)


# What gives a low-precision dtype fast matrix units, by device type.
FAST_UNITS = {("cpu", "bfloat16"): "AMX-BF16 or AVX-512 BF16",
              ("cpu", "float16"): "AMX-FP16 or AVX-512 FP16",
              ("cuda", "float16"): "tensor cores (compute capability 7.0 or newer)",
              ("cuda", "bfloat16"): "bfloat16 tensor cores (compute capability 8.0 or newer)"}


def device_notes(amp: Run, speedup: float) -> list[str]:
    """The device the AMP run used and what it offers its dtype; below 1x, why."""
    record = amp.records[-1]
    if "device_name" not in record:  # a trace from an older runtime
        return []
    device, dtype, fast = record["device"], record["dtype"], record["fast_dtypes"]
    name = f"device: {record['device_name']} ({device}"
    units = FAST_UNITS.get((device, dtype), f"fast {dtype} units")
    if fast is None:
        lines = [f"{name}): whether it has {units} is unknown"]
    elif dtype in fast:
        lines = [f"{name}; {', '.join(record['device_features'])}): fast {dtype} ({units})"]
    else:
        lines = [f"{name}): no {units}, so {dtype} is not accelerated and may be slower "
                 "than float32"]
    if speedup < 1 and fast is not None and dtype not in fast:
        lines.append(f"AMP is slower here, as expected: without {units}, {dtype} matrix "
                     f"products are emulated and cost more than float32 ones. Train on a device "
                     "that has them, or here in FP32 (AMPREWRITE_OPT_LEVEL=O0 turns AMP off "
                     "without rewriting).")
    elif speedup < 1 and fast is not None:
        lines.append(f"AMP is slower here although the device computes {dtype} fast: "
                     "in a model this small the casts and the scaler cost more than the "
                     "smaller matrix products save; wider layers and larger batches gain more.")
    return lines


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in rows]


def _indented(lines: list[str]) -> list[str]:
    return ["  " + line for line in lines]


LOSS_ROWS = 10  # steps shown in the per-step table: evenly spread, first and last included


def _loss_rows(fp32: Run, amp: Run) -> list[tuple[str, ...]]:
    """Step, both losses and their difference at up to LOSS_ROWS steps both runs took."""
    reference, other = fp32.losses, amp.losses
    steps = sorted(reference.keys() & other.keys())
    if len(steps) > LOSS_ROWS:
        last = len(steps) - 1
        steps = [steps[round(i * last / (LOSS_ROWS - 1))] for i in range(LOSS_ROWS)]
    rows: list[tuple[str, ...]] = [("step", fp32.label, amp.label, "abs diff", "rel diff")]
    for step in steps:
        difference = abs(other[step] - reference[step])
        rows.append((str(step), _number(reference[step]), _number(other[step]),
                     f"{difference:.3g}", f"{_ratio(difference, abs(reference[step])):.2%}"))
    return rows


SCALE_CHANGES_SHOWN = 8


def _scale_history(run: Run) -> str:
    """`65536 (step 1) -> 32768 (step 4) -> ...`: the scale at the first step and every change."""
    changes: list[tuple[int, float]] = []
    for record in run.records:
        if not changes or record["scale"] != changes[-1][1]:
            changes.append((record["step"], record["scale"]))
    shown = [f"{scale:g} (step {step})" for step, scale in changes[:SCALE_CHANGES_SHOWN]]
    if len(changes) > SCALE_CHANGES_SHOWN:
        shown.append(f"... {len(changes) - SCALE_CHANGES_SHOWN} more changes, last "
                     f"{changes[-1][1]:g} (step {changes[-1][0]})")
    return " -> ".join(shown)


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def _non_finite(run: Run) -> str:
    return str(sum(not math.isfinite(loss) for loss in run.losses.values()))


def _skipped(run: Run) -> str:
    return str(sum(bool(r["skipped"]) for r in run.records))


def _scales(run: Run) -> str:
    scales = [r["scale"] for r in run.records]
    return " / ".join(f"{s:g}" for s in (scales[0], min(scales), scales[-1]))


def _milliseconds(seconds: float) -> str:
    return f"{seconds * 1000:.3g} ms"


def plot(path: Path, fp32: Run, amp: Run, title: str) -> None:
    """Both loss curves (top) and the loss scale of both runs (bottom), to `path`, under
    `title` (the command) and the number of steps."""
    pyplot = _pyplot()
    from matplotlib.ticker import MaxNLocator

    figure, (losses, scales) = pyplot.subplots(2, 1, sharex=True, figsize=(8, 6),
                                               height_ratios=(5, 2))
    styles = {fp32.label: {"color": "tab:blue", "linestyle": "-", "marker": "o",
                           "markersize": 6, "linewidth": 2.5, "zorder": 2},
              amp.label: {"color": "tab:orange", "linestyle": "--", "marker": "x",
                          "markersize": 7, "linewidth": 1.5, "zorder": 3}}
    for run in (fp32, amp):
        points = sorted(run.losses.items())
        losses.plot([s for s, _ in points], [v for _, v in points], label=_legend(run),
                    **styles[run.label])
        scales.plot([r["step"] for r in run.records], [r["scale"] for r in run.records],
                    label=_legend(run), **styles[run.label])
    steps = max(len(fp32.records), len(amp.records))
    import textwrap

    figure.suptitle(f"{textwrap.fill(title, 100)}\n{steps} optimizer steps", fontsize=9)
    losses.set_ylabel("loss")
    losses.legend()
    losses.grid(alpha=0.3)
    scales.set_ylabel("loss scale")
    scales.set_yscale("log", base=2)
    scales.set_xlabel("optimizer step")
    scales.xaxis.set_major_locator(MaxNLocator(integer=True))
    if all(r["scale"] == 1 for r in (*fp32.records, *amp.records)):
        scales.text(0.5, 0.8, f"no loss scaling: {_no_scaling_reason(amp)}",
                    transform=scales.transAxes, ha="center", va="center", fontsize=9,
                    bbox={"facecolor": "white", "edgecolor": "grey", "alpha": 0.9})
    figure.tight_layout()
    try:
        figure.savefig(path)
    except OSError as exc:
        raise CompareError(f"cannot write the plot to {str(path)!r}: {exc.strerror}") from exc
    finally:
        pyplot.close(figure)


def _no_scaling_reason(amp: Run) -> str:
    dtype = amp.setting("dtype")
    if dtype == "bfloat16":
        return "bfloat16 has float32's range, so gradients need no scaling (scale 1)"
    return f"the scale stays 1 ({amp.label} runs in {dtype})"


def _legend(run: Run) -> str:
    return f"{run.label} ({run.setting('opt_level')}, {run.setting('dtype')})"


def _pyplot() -> Any:
    """matplotlib's pyplot on a file-only backend, imported only for --plot."""
    try:
        import matplotlib
    except ImportError:
        from amprewrite.install_source import install_command

        raise CompareError("--plot needs matplotlib, which is an optional extra: "
                           f"{install_command('plot')}", 2) from None
    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot


@click.command(context_settings={"help_option_names": ["-h", "--help"],
                                 "allow_interspersed_args": False})
@click.option("--steps", type=click.IntRange(min=1), default=50, show_default=True,
              help="Optimizer steps per run.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Draw both loss curves and the loss scale to this PNG "
                                 "(needs the `plot` extra: matplotlib).")
@click.option("--tolerance", type=click.FloatRange(min=0), default=DEFAULT_TOLERANCE,
              show_default=True,
              help="How far (relative) the AMP run's late loss may be from FP32's.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="The seed both runs start from (AMPREWRITE_SEED, PYTHONHASHSEED).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def compare(
    steps: int, plot_path: Path | None, tolerance: float, seed: int, command: tuple[str, ...]
) -> None:
    """Run a rewritten training script as FP32 and at its own opt level, and compare them.

    COMMAND (`python train.py`, or a notebook's path alone: `amprewrite compare nb.ipynb`
    runs its code cells as one script) runs twice, each time stopped after --steps optimizer
    steps: with AMPREWRITE_OPT_LEVEL=O0 (FP32), then at the script's own level (an
    AMPREWRITE_OPT_LEVEL in the environment is removed for that run; AMPREWRITE_DTYPE and
    AMPREWRITE_DEVICE apply to both). Prints the final losses, their divergence, skipped
    steps, the loss scale and the median step times, and a verdict: the AMP run trains like
    the FP32 one where its loss stays finite and its mean loss over the last quarter of the
    steps is within --tolerance of FP32's. Both runs start from the same seed (--seed: the
    runtime seeds Python, NumPy and torch when it is imported, and PYTHONHASHSEED is set).

    Exit status: 0 the runs agree, 1 a run failed or wrote no trace, or the AMP run diverged
    (past --tolerance, or a non-finite loss), 2 usage error.
    """
    from amprewrite.compare_notebooks import NOTEBOOK_ENVIRONMENT, is_notebook_path, script_command

    if plot_path is not None:
        _pyplot()  # refuse before spending the runs' time
    refuse_before_running(command)
    inherited = {k: v for k, v in os.environ.items() if k != ENV_OPT_LEVEL}
    inherited |= {ENV_SEED: str(seed), "PYTHONHASHSEED": str(seed % 2**32)}
    if is_notebook_path(command):
        inherited |= NOTEBOOK_ENVIRONMENT
        command = tuple(script_command(command[0]))
    runs = []
    for label, extra in (("FP32", {ENV_OPT_LEVEL: "O0"}), ("AMP", {})):
        click.echo(f"amprewrite compare: {label} run of `{_shell(command)}` ...", err=True)
        runs.append(run_traced(command, label, {**inherited, **extra}, steps))
    fp32, amp = runs
    click.echo(report(fp32, amp))
    if plot_path is not None:
        plot(plot_path, fp32, amp, f"amprewrite compare --steps {steps} -- {_shell(command)}")
        click.echo(f"plot written to {plot_path}", err=True)
    problem = verdict(fp32, amp, tolerance)
    if problem is not None:
        click.echo(f"verdict: diverged: {problem}")
        raise CompareError(f"the AMP run diverged from FP32: {problem}")
    click.echo(f"verdict: the AMP run trains like FP32 (its late loss within {tolerance:.1%})")
