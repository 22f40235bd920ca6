"""`amprewrite PATH... [--opt-level O1] [--diff] [--check] [--plain]`: the command line."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import click

from amprewrite import __version__
from amprewrite.catalog import Severity, default_docs_url
from amprewrite.config import ConfigError, find_pyproject, read_config
from amprewrite.discovery import DEFAULT_INCLUDE, Problem, Target, find_targets, forced_out
from amprewrite.fileio import resolved
from amprewrite.filters import keep_findings
from amprewrite.findings import Finding
from amprewrite.options import DTYPES, OPT_LEVELS, Options, validate
from amprewrite.output_formats import print_github, print_json, print_sarif, print_statistics
from amprewrite.parallel import run_files
from amprewrite.report import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_PIPE_CLOSED,
    Verbosity,
    apply_hint,
    exit_code,
    in_reported_mood,
    print_diff,
    report_findings,
    report_order,
    runtime_hint,
    summary,
)
from amprewrite.runner import FileOutcome, Status, is_notebook, process_source
from amprewrite.streams import STDIN, colour, report_on_stderr
from amprewrite.suppressions import per_file_ignores
from amprewrite.usage_checks import UsageProblem, check_settings, code_prefixes


def _explain(ctx: click.Context, parameter: click.Parameter, value: str | None) -> None:
    """`--explain CODE`, with the docs URL of the configuration found from the current
    directory (as ruff finds it: --explain is eager, so --config and the paths are not read)."""
    if value is None or ctx.resilient_parsing:
        return
    from amprewrite.explain import explain_option  # loads the catalog: only for --explain

    _, config = _config(None, [])
    explain_option(ctx, parameter, value, docs_url_template(config))


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("paths", nargs=-1, required=True, metavar="PATH...",
                type=click.Path(path_type=str))
@click.option("--opt-level", type=click.Choice(OPT_LEVELS), default="O1", show_default=True,
              help="apex.amp opt level: O0 FP32, O1 autocast, O2 cast model + master "
                   "weights, O3 pure low precision.")
@click.option("--dtype", type=click.Choice(DTYPES), default=None,
              help="Low-precision dtype (default: chosen at run time, bfloat16 where "
                   "the machine has it, else float16). float8: bfloat16 plus torchao's "
                   "float8 linear layers where the GPU has them (O1).")
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
@click.option("--check", is_flag=True,
              help="Write nothing; exit 1 if any file would change or holds an AMP mistake "
                   "(a lint finding).")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when files were rewritten.")
@click.option("--unsafe-fixes", is_flag=True,
              help="Also apply the lint fixes the protocol check cannot confirm (a site no path "
                   "it can see reaches); by default they are reported, not applied.")
@click.option("--stdin-filename", default=STDIN, metavar="NAME",
              help="The path `-` stands for: shown in findings and diffs; the configuration "
                   "is found from it, and --force-exclude applies to it.")
@click.option("--include", default=DEFAULT_INCLUDE, show_default=True, metavar="REGEX",
              help="Files a directory walk takes: Python sources and Jupyter notebooks.")
@click.option("--exclude", default=None, metavar="REGEX",
              help="Files and directories to leave out of directory walks (replaces the "
                   "config's).")
@click.option("--extend-exclude", default=None, metavar="REGEX",
              help="More files and directories to leave out, on top of --exclude.")
@click.option("--force-exclude", is_flag=True,
              help="Apply the excludes to paths named on the command line too (for "
                   "pre-commit, which names every staged file).")
@click.option("--select", default=None, metavar="CODES",
              help="Report only findings whose code starts with one of these (comma-separated).")
@click.option("--ignore", default=None, metavar="CODES",
              help="Do not report findings whose code starts with one of these.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Files processed in parallel (default: all cores).")
@click.option("--output-format", type=click.Choice(["text", "json", "github", "sarif"]),
              default="text", show_default=True,
              help="How findings are reported (sarif: SARIF 2.1.0, for GitHub code scanning).")
@click.option("--statistics", is_flag=True,
              help="Report how many findings of each code, not each finding.")
@click.option("-o", "--output-file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Write the report (findings, summary) to this file.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="pyproject.toml to read [tool.amprewrite] from.")
@click.option("-q", "--quiet", is_flag=True, help="Report errors only; no summary.")
@click.option("-v", "--verbose", is_flag=True, help="Report every finding and each file.")
@click.option("--explain", metavar="CODE", expose_value=False, is_eager=True,
              callback=_explain,
              help="Say what a finding code means, why it fires, what to do, with an example.")
@click.version_option(__version__, "--version", prog_name="amprewrite",
                      message="%(prog)s %(version)s")
@click.pass_context
def main(
    ctx: click.Context,
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
    unsafe_fixes: bool,
    stdin_filename: str,
    include: str,
    exclude: str | None,
    extend_exclude: str | None,
    force_exclude: bool,
    select: str | None,
    ignore: str | None,
    jobs: int | None,
    output_format: str,
    statistics: bool,
    output_file: Path | None,
    config_path: Path | None,
    quiet: bool,
    verbose: bool,
) -> None:
    """Rewrite FP32 PyTorch training scripts and Jupyter notebooks into mixed-precision ones,
    in place.

    Directories are walked for *.py and *.ipynb files; `-` reads standard input and writes the
    result to standard output (a notebook with --stdin-filename NAME.ipynb). Findings go to
    standard error as `path:line:col: AMPnnn message` (`path:cell N:line:col: ...` in a
    notebook, cells counted from 1, markdown cells included).

    Exit status: 0 nothing to change, 1 files rewritten (or would be, with --check/--diff;
    with --check also an AMP mistake, a lint finding; 0 with --exit-zero), 2 usage error,
    123 a file could not be read, parsed or written (or an internal error; with --check
    also a file abandoned over its time budget, AMP009), 130 interrupted
    (Ctrl-C), 141 standard output closed early (`| head`).

    `amprewrite compare -- python train.py` runs a rewritten script as FP32 and with AMP and
    compares losses and speed (see `amprewrite compare --help`; a file named `compare` is
    written `./compare`).
    """
    ctx.color = colour()
    with _exit_codes():
        settings, root = _settings(ctx, paths, config_path)
        options = Options(settings["opt_level"], settings["dtype"], settings["plain"],
                          settings["keep_batchnorm_fp32"], settings["master_weights"],
                          settings["loss_scale"], reproducible=settings["reproducible"],
                          seed=settings["seed"],
                          line_length=_line_length(_named(paths, stdin_filename)),
                          unsafe_fixes=settings["unsafe_fixes"],
                          select=code_prefixes(settings["select"]),
                          ignore=code_prefixes(settings["ignore"]),
                          per_file_ignores=per_file_ignores(settings["per_file_ignores"],
                                                            resolved(root)))
        _refuse_bad_usage(paths, options, quiet and verbose)
        verbosity = Verbosity.QUIET if quiet else Verbosity.VERBOSE if verbose else Verbosity.NORMAL
        write = not (check or show_diff)
        excludes = _patterns(settings["exclude"], settings["extend_exclude"])
        stdin_excluded = settings["force_exclude"] and stdin_filename != STDIN and forced_out(
            Path(stdin_filename), root, excludes)
        outcomes = [_stdin(stdin_filename, options, write, stdin_excluded)] if (
            STDIN in paths) else []
        [include] = _patterns(settings["include"] or DEFAULT_INCLUDE)
        found = find_targets([Path(path) for path in paths if path != STDIN], excludes,
                             root if settings["force_exclude"] else None, include)
        outcomes.extend(_problems(found.problems))
        linked, alone = _projects(found.targets, options, write, jobs)
        outcomes.extend(linked)
        outcomes.extend(_alone(alone, options, write, jobs, progress=output_format == "text"))
        outcomes = [in_reported_mood(keep_findings(outcome, options), not write)
                    for outcome in report_order(outcomes)]
        text = summary(outcomes, would=not write, excluded=found.excluded)
        err = report_on_stderr(paths, write) and output_file is None
        with report_to(output_file):
            _report(ctx, outcomes, output_format, statistics, verbosity, show_diff, write,
                    err, text, settings["docs_url"])
        sys.exit(exit_code(outcomes, exit_zero, check))


def _report(
    ctx: click.Context, outcomes: list[FileOutcome], output_format: str, statistics: bool,
    verbosity: Verbosity, show_diff: bool, write: bool, err: bool, text: str,
    docs_url: str | None,
) -> None:
    """The report in the format asked for (`err`: on stderr, where stdout holds the code);
    `docs_url`: the template of each code's docs URL (JSON's `url`, SARIF's `helpUri`)."""
    if statistics:
        print_statistics(outcomes, err)
    elif output_format == "json":
        print_json(outcomes, not write, text, err, docs_url=docs_url)
    elif output_format == "github":
        print_github(outcomes, not write, err)
    elif output_format == "sarif":
        print_sarif(outcomes, not write, err, docs_url=docs_url)
    else:
        for outcome in outcomes:
            report_findings(outcome, verbosity, would=not write)
            if show_diff and outcome.status is Status.CHANGED:
                print_diff(outcome)
        if verbosity is not Verbosity.QUIET:
            _print_hints(ctx, outcomes)
            click.echo(text, err=True)


@contextlib.contextmanager
def report_to(path: Path | None) -> Iterator[None]:
    """Everything printed in the block goes to `path`, where one is given."""
    if path is None:
        yield
        return
    with path.open("w", encoding="utf-8") as stream, contextlib.redirect_stdout(
            stream), contextlib.redirect_stderr(stream):
        yield


@contextlib.contextmanager
def _exit_codes() -> Iterator[None]:
    """Ctrl-C exits 130 and a crash outside any one file (every file's own failure is a
    finding) 123, each with one line and no traceback: 1 means that files were rewritten."""
    try:
        yield
    except click.ClickException:
        raise
    except KeyboardInterrupt:
        click.echo("amprewrite: interrupted; each file is as it was or completely rewritten",
                   err=True)
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:  # `amprewrite --diff . | head`: stop quietly, as `cat` does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        sys.exit(EXIT_PIPE_CLOSED)
    except Exception as exc:
        click.echo(f"amprewrite: internal error ({type(exc).__name__}: {exc}); please report "
                   "it", err=True)
        sys.exit(EXIT_FAILED)


def _projects(
    targets: list[Target], options: Options, write: bool, jobs: int | None
) -> tuple[list[FileOutcome], list[Target]]:
    """The outcomes of the files whose training step spans several modules (rewritten
    together), and the targets left to rewrite one by one."""
    from amprewrite.project.rewrite import links_projects, rewrite_project  # loads libcst

    sources = {resolved(t.path): t for t in targets if not is_notebook(str(t.path))}
    if not sources or not links_projects(options):
        return [], targets
    outcomes, handled = rewrite_project({p: str(t.path) for p, t in sources.items()},
                                        options, write, jobs)
    explicit = {str(t.path): t.explicit for t in targets}
    for outcome in outcomes:
        outcome.explicit = explicit.get(outcome.path, True)
    return outcomes, [t for t in targets if resolved(t.path) not in handled]


def _alone(
    targets: list[Target], options: Options, write: bool, jobs: int | None, progress: bool
) -> list[FileOutcome]:
    """The files rewritten one by one; those of a project whose training runs the author's
    own mixed precision with `Options.project_amp` naming that file."""
    from amprewrite.project.own_amp import own_amp_owners

    python = {resolved(t.path): str(t.path) for t in targets if not is_notebook(str(t.path))}
    owners = own_amp_owners(python, options) if options.opt_level != "O0" and len(
        python) > 1 else {}
    groups: dict[str | None, list[Target]] = {}
    for target in targets:
        groups.setdefault(owners.get(resolved(target.path)), []).append(target)
    outcomes = []
    for owner, group in groups.items():
        kept = options if owner is None else replace(options, project_amp=owner)
        outcomes.extend(run_files(group, kept, write, jobs, progress=progress))
    return outcomes


def _problems(problems: list[Problem]) -> list[FileOutcome]:
    """An outcome for each entry the walk could not use as it is (a `.gitignore`, a symlink
    leading outside), failed when one of its findings is an error."""
    findings: dict[Path, list[Finding]] = {}
    for path, finding in problems:
        findings.setdefault(path, []).append(finding)
    return [FileOutcome(str(path), Status.FAILED if any(f.severity is Severity.ERROR
                                                        for f in found) else Status.UNCHANGED,
                        found, explicit=False) for path, found in findings.items()]


def _print_hints(ctx: click.Context, outcomes: list[FileOutcome]) -> None:
    """Once per run: the runtime the rewritten files need (not for --check alone, which is
    about failing, not about training), and with --check/--diff the command that applies
    the changes."""
    check, diff = ctx.params["check"], ctx.params["show_diff"]
    would = check or diff
    hint = None if check and not diff else runtime_hint(outcomes, would)
    if hint is not None:
        click.echo(hint, err=True)
    changed = [outcome.path for outcome in outcomes if outcome.status is Status.CHANGED]
    if would and changed:
        click.echo(apply_hint(_applying_command(ctx, changed)), err=True)


_FILES_NAMED = 5  # at most, in the command that applies the changes, unless named so
_NOT_APPLYING = frozenset({"check", "show_diff", "exit_zero", "select", "ignore", "jobs",
                           "output_format", "quiet", "verbose"})


def _applying_command(ctx: click.Context, changed: list[str]) -> str:
    """This run's command line without --check, --diff and the options that only change the
    report (-v, --jobs, ...): the run that writes the changes. It names the files that would
    change when they are few (pre-commit names every staged file), else this run's paths."""
    words = ["amprewrite"]
    for parameter in ctx.command.params:
        source = ctx.get_parameter_source(parameter.name)
        if (not isinstance(parameter, click.Option) or parameter.name in _NOT_APPLYING
                or source is not click.core.ParameterSource.COMMANDLINE):
            continue
        value = ctx.params[parameter.name]
        if parameter.is_flag:
            names = parameter.opts if value or not parameter.secondary_opts else (
                parameter.secondary_opts)
            words.append(max(names, key=len))
        else:
            words += [max(parameter.opts, key=len), str(value)]
    paths = ctx.params["paths"]
    few = len(changed) <= max(len(paths), _FILES_NAMED)
    words += changed if few and STDIN not in paths else paths
    return shlex.join(words)


def entry_point() -> None:
    """The `amprewrite` command: `amprewrite compare ...` compares runs, anything else rewrites."""
    arguments = sys.argv[1:]
    if arguments[:1] == ["compare"]:
        from amprewrite.compare import compare  # not loaded by the codemod's runs

        compare(arguments[1:], prog_name="amprewrite compare")
    else:
        main(arguments, prog_name="amprewrite")


_CONFIGURABLE = ("opt_level", "dtype", "plain", "keep_batchnorm_fp32", "master_weights",
                 "loss_scale", "reproducible", "seed", "include", "exclude", "extend_exclude",
                 "force_exclude", "select", "ignore", "unsafe_fixes")


def _settings(
    ctx: click.Context, paths: tuple[str, ...], config_path: Path | None
) -> tuple[dict, Path]:
    """Command-line values, with [tool.amprewrite] filling what the command line left out,
    and the project root (the config's directory, else the current one) that --force-exclude
    matches named paths against."""
    settings = {name: ctx.params[name] for name in _CONFIGURABLE}
    pyproject, config = _config(config_path, _named(paths, ctx.params["stdin_filename"]))
    from_config = [name for name in config
                   if ctx.get_parameter_source(name) is click.core.ParameterSource.DEFAULT]
    for name in from_config:
        value = config[name]
        settings[name] = ",".join(value) if isinstance(value, list) else value
    settings["per_file_ignores"] = config.get("per_file_ignores", {})
    settings["docs_url"] = docs_url_template(config)
    given = [name for name in settings if name in from_config
             or ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT]
    try:
        check_settings(settings, given, from_config, pyproject)
    except UsageProblem as exc:
        raise click.UsageError(str(exc)) from exc
    return settings, pyproject.parent if pyproject is not None else Path.cwd()


def _config(config_path: Path | None, named: list[Path]) -> tuple[Path | None, dict]:
    """The pyproject.toml in use (`--config`, else the nearest with a [tool.amprewrite] above
    the `named` paths, the current directory where none is named) and its table; a
    configuration error is a usage error (exit 2)."""
    try:
        pyproject = config_path or find_pyproject(named)
        return pyproject, read_config(pyproject) if pyproject is not None else {}
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc


def docs_url_template(config: dict) -> str | None:
    """The template of each code's docs URL: `docs-url`, else the project's findings page."""
    return config.get("docs_url", default_docs_url())


def _line_length(paths: list[Path]) -> int | None:
    from amprewrite.line_length import configured_line_length  # reads files: only here

    return configured_line_length(paths)


def _named(paths: tuple[str, ...], stdin_filename: str) -> list[Path]:
    """The paths the configuration is found from: those named, and the one standard input
    stands for (`--stdin-filename`), as black and ruff find it."""
    named = [Path(p) for p in paths if p != STDIN]
    if STDIN in paths and stdin_filename != STDIN:
        named.append(Path(stdin_filename))
    return named


def _patterns(*patterns: str | None) -> tuple[re.Pattern[str], ...]:
    try:
        return tuple(re.compile(p) for p in patterns if p)
    except re.error as exc:
        raise click.UsageError(f"invalid include or exclude pattern: {exc}") from exc


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


def _stdin(name: str, options: Options, write: bool, excluded: bool) -> FileOutcome:
    """Standard input to standard output: the whole source, changed or not (like black); as
    it was where its name is excluded (`--force-exclude`: an editor's format-on-save)."""
    source = sys.stdin.buffer.read()
    outcome = FileOutcome(name, Status.UNCHANGED, [], source, source) if excluded else (
        process_source(name, source, options, explicit=True))
    if write:
        sys.stdout.buffer.write(outcome.after)
        sys.stdout.buffer.flush()
    return outcome
