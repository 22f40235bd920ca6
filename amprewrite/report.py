"""What the user sees: findings on stderr, diffs on stdout, a summary line, the exit code."""

from __future__ import annotations

import enum
import io
import tokenize
from collections.abc import Iterable
from pathlib import PurePath
from typing import Any

import click

from amprewrite.findings import CODES, Finding, Severity
from amprewrite.runner import FileOutcome, Status

EXIT_NOTHING_TO_CHANGE = 0
EXIT_CHANGED = 1
EXIT_USAGE = 2  # raised through click.UsageError, which exits with it
EXIT_FAILED = 123


class Verbosity(enum.IntEnum):
    QUIET = -1  # errors only, no summary
    NORMAL = 0
    VERBOSE = 1  # every finding, and each file's status


def exit_code(outcomes: Iterable[FileOutcome], exit_zero: bool) -> int:
    """123 when any file failed, else 1 when any changed or holds an AMP mistake (0 with
    `exit_zero`), else 0."""
    outcomes = list(outcomes)
    statuses = {outcome.status for outcome in outcomes}
    if Status.FAILED in statuses:
        return EXIT_FAILED
    mistakes = any(CODES.get(f.code) is not None and CODES[f.code].severity is Severity.LINT
                   for outcome in outcomes for f in outcome.findings)
    if (Status.CHANGED in statuses or mistakes) and not exit_zero:
        return EXIT_CHANGED
    return EXIT_NOTHING_TO_CHANGE


def report_order(outcomes: Iterable[FileOutcome]) -> list[FileOutcome]:
    """Outcomes sorted by path (component-wise, as directories are walked)."""
    return sorted(outcomes, key=lambda outcome: PurePath(outcome.path).parts)


def visible(finding: Finding, explicit: bool, verbosity: Verbosity) -> bool:
    """Errors always; changes and skips unless quiet; notes when verbose, or by default for
    files named on the command line (not for files found by walking a directory)."""
    code = CODES.get(finding.code)
    severity = code.severity if code else Severity.CHANGE  # an unregistered code: still shown
    if severity is Severity.ERROR or verbosity is Verbosity.VERBOSE:
        return True
    if verbosity is Verbosity.QUIET:
        return False
    return severity is not Severity.NOTE or explicit


def report_findings(outcome: FileOutcome, verbosity: Verbosity, would: bool) -> None:
    """The file's visible findings by line, then (verbose) its status, on stderr."""
    for finding in sorted(outcome.findings, key=lambda f: (f.line, f.col, f.code)):
        if visible(finding, outcome.explicit, verbosity):
            click.echo(finding.format(outcome.path), err=True)
    if verbosity is Verbosity.VERBOSE:
        click.echo(f"{outcome.path}: {status_text(outcome.status, would)}", err=True)


def status_text(status: Status, would: bool) -> str:
    return {
        Status.CHANGED: "would be rewritten" if would else "rewritten",
        Status.UNCHANGED: "would be left unchanged" if would else "left unchanged",
        Status.FAILED: "failed",
    }[status]


def print_diff(outcome: FileOutcome) -> None:
    """A unified diff of the outcome on stdout; coloured only when stdout is a terminal."""
    before, after = _lines(outcome.before), _lines(outcome.after)
    import difflib  # imported here: only --diff needs it

    diff = difflib.unified_diff(before, after, outcome.path, outcome.path)
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


def summary(outcomes: list[FileOutcome], would: bool) -> str:
    """Black-style: `2 files rewritten, 3 files left unchanged, 1 file failed`."""
    parts = []
    for status in (Status.CHANGED, Status.UNCHANGED, Status.FAILED):
        count = sum(outcome.status is status for outcome in outcomes)
        if count:
            files = "1 file" if count == 1 else f"{count} files"
            parts.append(f"{files} {status_text(status, would)}")
    return ", ".join(parts) if parts else "no Python files found; nothing to do"
