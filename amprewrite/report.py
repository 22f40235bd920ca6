"""What the user sees: findings on stderr, diffs on stdout, a summary line, the exit code."""

from __future__ import annotations

import enum
import io
import re
import tokenize
from collections.abc import Iterable
from dataclasses import replace
from pathlib import PurePath
from typing import Any

import click

from amprewrite.budget import OVER_TIME
from amprewrite.catalog import Severity
from amprewrite.code_index import lookup
from amprewrite.findings import NOTHING_TO_DO, Finding
from amprewrite.notebook_cells import position
from amprewrite.protocol.invariants import REJECTIONS
from amprewrite.runner import FileOutcome, Status

EXIT_NOTHING_TO_CHANGE = 0
EXIT_CHANGED = 1
EXIT_USAGE = 2  # raised through click.UsageError, which exits with it
EXIT_FAILED = 123  # a file could not be processed, or the run itself failed
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT
EXIT_PIPE_CLOSED = 141  # the reader of standard output went away (`| head`), as for SIGPIPE


class Verbosity(enum.IntEnum):
    QUIET = -1  # errors only, no summary
    NORMAL = 0
    VERBOSE = 1  # every finding, and each file's status


def exit_code(outcomes: Iterable[FileOutcome], exit_zero: bool, check: bool) -> int:
    """123 when any file failed (or, with `check`, was abandoned over its time budget, AMP009);
    else 1 when any file was rewritten (or would be, with
    --check/--diff), or, with `check`, holds an AMP mistake (a LINT finding; 0 with
    `exit_zero` either way); else 0."""
    outcomes = list(outcomes)
    statuses = {outcome.status for outcome in outcomes}
    if Status.FAILED in statuses:
        return EXIT_FAILED
    if check and any(f.code == OVER_TIME for outcome in outcomes for f in outcome.findings):
        return EXIT_FAILED  # a file the check gave up on is not a file it passed
    mistakes = check and any(f.severity is Severity.LINT
                             for outcome in outcomes for f in outcome.findings)
    if (Status.CHANGED in statuses or mistakes) and not exit_zero:
        return EXIT_CHANGED
    return EXIT_NOTHING_TO_CHANGE


def report_order(outcomes: Iterable[FileOutcome]) -> list[FileOutcome]:
    """Outcomes sorted by path (component-wise, as directories are walked)."""
    return sorted(outcomes, key=lambda outcome: PurePath(outcome.path).parts)


def visible(finding: Finding, explicit: bool, verbosity: Verbosity) -> bool:
    """Errors always; changes and skips unless quiet; notes when verbose, or by default for
    files named on the command line (not for files found by walking a directory), except
    that a file has nothing to do (NOTHING_TO_DO: pre-commit names every staged file, most
    have nothing to do), which only -v shows."""
    severity = finding.severity
    if severity is Severity.ERROR or verbosity is Verbosity.VERBOSE:
        return True
    if verbosity is Verbosity.QUIET or finding.code == NOTHING_TO_DO:
        return False
    return severity is not Severity.NOTE or explicit


def report_findings(outcome: FileOutcome, verbosity: Verbosity, would: bool) -> None:
    """The file's visible findings by line (a notebook's by cell, then line), then (verbose)
    its status (`would`: with --check/--diff), on stderr."""
    for finding in sorted(outcome.findings, key=position):
        if visible(finding, outcome.explicit, verbosity):
            click.echo(finding.format(outcome.path), err=True)
    if verbosity is Verbosity.VERBOSE:
        click.echo(f"{outcome.path}: {status_text(outcome.status, would)}", err=True)


def in_reported_mood(outcome: FileOutcome, would: bool) -> FileOutcome:
    """The outcome with its changes in the mood of what happened to the file, for every output
    format: the conditional when nothing was written, with --check/--diff (`would`) or because
    the file could not be written (a read-only file: failed, left as it was)."""
    if not would and outcome.status is not Status.FAILED:
        return outcome
    return replace(outcome, findings=[_in_conditional(f) for f in outcome.findings])


def _in_conditional(finding: Finding) -> Finding:
    code = lookup(finding.code)
    if code is None or code.severity is not Severity.CHANGE:
        return finding
    return replace(finding, message=conditional(finding.message))  # a CellFinding stays one


# A change's past participle: a word ending in -ed or an irregular one, not the message's first
# word, not after `is`/`are` (a state, not the change), followed by the end, punctuation or a
# preposition: "`x.step()` routed through ...", "scaler state saved under ...".
_PARTICIPLE = re.compile(
    r"(?<=\S )(?<!\bis )(?<!\bare )\b(?:[a-z]+ed|cast|set|kept|made|built|put|split)"
    r"(?=$|[:;,.)(]| \(| (?:in|into|to|from|through|by|before|after|under|as|for|only|right|"
    r"next|at|with|on|out|over|when|once)\b)")
IF_NOT_CONJUGATED = "after the rewrite, "


def conditional(message: str) -> str:
    """A change message in the conditional, for --check and --diff, which write nothing:
    "would be" before its past participle (outside backticks), e.g. "`opt.step()` routed
    through `scaler.step(opt)`" -> "`opt.step()` would be routed through ...". A message
    without one ("`x` casts the model for O2") is prefixed IF_NOT_CONJUGATED."""
    for match in _PARTICIPLE.finditer(message):
        if message.count("`", 0, match.start()) % 2 == 0:  # not inside code
            return f"{message[:match.start()]}would be {message[match.start():]}"
    return IF_NOT_CONJUGATED + message


def apply_hint(command: str) -> str:
    """The last line of --check/--diff when something would change."""
    return f"to apply these changes: {command}"


def runtime_hint(outcomes: Iterable[FileOutcome], would: bool) -> str | None:
    """Said once when rewritten files start importing amprewrite_runtime (runtime style):
    the environment that trains them needs it."""
    module = b"amprewrite_runtime"
    if not any(outcome.status is Status.CHANGED and module in outcome.after
               and module not in outcome.before for outcome in outcomes):
        return None
    from amprewrite.install_source import install_command

    verb = "would import" if would else "now import"
    return (f"rewritten files {verb} amprewrite_runtime: where they train, run "
            f"`{install_command()}` (or rewrite with --plain for torch.amp only)")


def status_text(status: Status, would: bool) -> str:
    return {
        Status.CHANGED: "would be rewritten" if would else "rewritten",
        Status.UNCHANGED: "would be left unchanged" if would else "left unchanged",
        Status.FAILED: "failed",
    }[status]


def print_diff(outcome: FileOutcome) -> None:
    """A unified diff of the outcome on stdout, for a notebook one per changed cell (headed
    `train.ipynb:cell 5`, as black and nbQA show them); coloured only on a terminal."""
    if outcome.cells is None:
        _print_diff(_lines(outcome.before), _lines(outcome.after), outcome.path)
        return
    for number in outcome.cells.changed():
        before, after = outcome.cells.before[number - 1], outcome.cells.after[number - 1]
        _print_diff(_cell_lines(before), _cell_lines(after), f"{outcome.path}:cell {number}")


def _print_diff(before: list[str], after: list[str], name: str) -> None:
    import difflib  # imported here: only --diff needs it

    diff = difflib.unified_diff(before, after, name, name)
    for index, line in enumerate(diff):
        body = line.rstrip("\r\n")
        ending = line[len(body):] or "\n\\ No newline at end of file\n"
        style: dict[str, Any] = {"bold": True} if index < 2 else _DIFF_STYLES.get(body[:1], {})
        shown = click.style(body, **style) if style else body  # colour stops at the newline
        click.echo(shown + ending, nl=False)


_DIFF_STYLES: dict[str, dict[str, Any]] = {"+": {"fg": "green"}, "-": {"fg": "red"},
                                           "@": {"fg": "cyan"}}


def _lines(source: bytes) -> list[str]:
    """Decoded as Python would (PEP 263 declaration, BOM), split on newlines only."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
        text = source.decode(encoding)
    except (SyntaxError, LookupError, UnicodeError):
        text = source.decode("utf-8", "replace")
    return io.StringIO(text, newline="").readlines()  # keeps \r\n; no split on \f or \x1c


def _cell_lines(source: str) -> list[str]:
    """A cell's lines, the last one ended like the others (a cell's source has no final
    newline, which a diff of a file would flag)."""
    lines = io.StringIO(source, newline="").readlines()
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n"
    return lines


def summary(outcomes: list[FileOutcome], would: bool, excluded: int = 0) -> str:
    """Black-style: `2 files rewritten, 3 files left unchanged, 1 file failed`; with no file,
    whether `excluded` paths (exclude patterns, .gitignore) left every one out."""
    parts = []
    for status in (Status.CHANGED, Status.UNCHANGED, Status.FAILED):
        count = sum(outcome.status is status for outcome in outcomes)
        if count:
            files = "1 file" if count == 1 else f"{count} files"
            parts.append(f"{files} {status_text(status, would)}")
    rejected = sum(f.code in REJECTIONS for outcome in outcomes for f in outcome.findings)
    if rejected:
        sites = "1 site" if rejected == 1 else f"{rejected} sites"
        parts.append(f"{sites} where the protocol check rejected the rewrite (AMP7xx)")
    if parts:
        return ", ".join(parts)
    if excluded:
        paths = "1 path" if excluded == 1 else f"{excluded} paths"
        return (f"no Python files to process: all excluded ({paths} matched exclude, "
                "extend-exclude or .gitignore); nothing to do")
    return "no Python files found; nothing to do"
