"""`amprewrite PATH... [--opt-level O1] [--diff] [--check] [--plain]`: the command line."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from amprewrite import __version__
from amprewrite.discovery import discover
from amprewrite.options import DTYPES, OPT_LEVELS, Options, validate
from amprewrite.report import (
    Verbosity,
    exit_code,
    print_diff,
    report_findings,
    report_order,
    summary,
)
from amprewrite.runner import FileOutcome, Status, process_file, process_source

STDIN = "-"


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, required=True, metavar="PATH...",
                type=click.Path(path_type=str))
@click.option("--opt-level", type=click.Choice(OPT_LEVELS), default="O1", show_default=True,
              help="apex.amp opt level: O0 FP32, O1 autocast, O2 cast model + master "
                   "weights, O3 pure low precision.")
@click.option("--dtype", type=click.Choice(DTYPES), default=None,
              help="Low-precision dtype (default: float16 on CUDA, bfloat16 on the CPU).")
@click.option("--keep-batchnorm-fp32/--no-keep-batchnorm-fp32", default=None,
              help="O2/O3: keep batchnorm weights in FP32 (default: on for O2, off for O3).")
@click.option("--master-weights/--no-master-weights", default=None,
              help="O2/O3: FP32 master weights stepped by the optimizer (default: on for O2).")
@click.option("--loss-scale", default=None, metavar="dynamic|FLOAT",
              help="'dynamic', or a static scale (default: dynamic; 1.0 for O0 and O3).")
@click.option("--plain", is_flag=True, help="Emit torch.amp only: no runtime import (O0/O1).")
@click.option("--reproducible", is_flag=True,
              help="Seed everything at the entry point and seed shuffled DataLoaders.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for --reproducible.")
@click.option("--diff", "show_diff", is_flag=True, help="Print a unified diff; write nothing.")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if any file would change.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when files were rewritten.")
@click.option("--stdin-filename", default=STDIN, metavar="NAME",
              help="Name shown for `-` in findings and diffs.")
@click.option("-q", "--quiet", is_flag=True, help="Report errors only; no summary.")
@click.option("-v", "--verbose", is_flag=True, help="Report every finding and each file.")
@click.version_option(__version__, "--version", prog_name="amprewrite",
                      message="%(prog)s %(version)s")
def main(
    paths: tuple[str, ...],
    opt_level: str,
    dtype: str | None,
    keep_batchnorm_fp32: bool | None,
    master_weights: bool | None,
    loss_scale: str | None,
    plain: bool,
    reproducible: bool,
    seed: int,
    show_diff: bool,
    check: bool,
    exit_zero: bool,
    stdin_filename: str,
    quiet: bool,
    verbose: bool,
) -> None:
    """Rewrite FP32 PyTorch training scripts into mixed-precision ones, in place.

    Directories are walked for *.py files; `-` reads standard input and writes the result to
    standard output. Findings go to standard error as `path:line:col: AMPnnn message`.

    Exit status: 0 nothing to change, 1 files rewritten (or would be, with --check/--diff;
    0 with --exit-zero), 2 usage error, 123 a file could not be read, parsed or written.
    """
    options = Options(opt_level, dtype, plain, keep_batchnorm_fp32, master_weights, loss_scale,
                      reproducible=reproducible, seed=seed)
    _refuse_bad_usage(paths, options, quiet and verbose)
    verbosity = Verbosity.QUIET if quiet else Verbosity.VERBOSE if verbose else Verbosity.NORMAL
    write = not (check or show_diff)
    outcomes = [_stdin(stdin_filename, options, write)] if STDIN in paths else []
    targets = discover([Path(path) for path in paths if path != STDIN])
    outcomes.extend(process_file(target.path, options, write, target.explicit)
                    for target in targets)
    for outcome in report_order(outcomes):
        report_findings(outcome, verbosity, would=not write)
        if show_diff and outcome.status is Status.CHANGED:
            print_diff(outcome)
    if verbosity is not Verbosity.QUIET:
        click.echo(summary(outcomes, would=not write), err=True)
    sys.exit(exit_code(outcomes, exit_zero))


def _refuse_bad_usage(paths: tuple[str, ...], options: Options, quiet_and_verbose: bool) -> None:
    """Exit 2 (click's usage error) on an impossible combination or a missing path."""
    problem = validate(options)
    if problem is not None:
        raise click.UsageError(problem)
    if quiet_and_verbose:
        raise click.UsageError("-q/--quiet and -v/--verbose cannot be combined")
    if paths.count(STDIN) > 1:
        raise click.UsageError("`-` (standard input) can be given only once")
    missing = [path for path in paths if path != STDIN and not (path and Path(path).exists())]
    if missing:  # an empty argument (`amprewrite "$UNSET"`) is missing, not the current directory
        raise click.UsageError(f"no such file or directory: {', '.join(map(repr, missing))}")


def _stdin(name: str, options: Options, write: bool) -> FileOutcome:
    """Standard input to standard output: the whole source, changed or not (like black)."""
    source = sys.stdin.buffer.read()
    outcome = process_source(name, source, options, explicit=True)
    if write:
        sys.stdout.buffer.write(outcome.after)
        sys.stdout.buffer.flush()
    return outcome
