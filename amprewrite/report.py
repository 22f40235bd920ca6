"""What the user sees: findings on stderr, diffs on stdout, a summary line, the exit code."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

import click

from amprewrite.findings import Severity
from amprewrite.runner import FileOutcome, Status

EXIT_NOTHING_TO_CHANGE = 0
EXIT_CHANGED = 1
EXIT_USAGE = 2
EXIT_FAILED = 123


def exit_code(outcomes: Iterable[FileOutcome], exit_zero: bool) -> int:
    """123 when any file failed, else 1 when any changed (unless `exit_zero`), else 0."""
    statuses = {outcome.status for outcome in outcomes}
    if Status.FAILED in statuses:
        return EXIT_FAILED
    if Status.CHANGED in statuses and not exit_zero:
        return EXIT_CHANGED
    return EXIT_NOTHING_TO_CHANGE


def report_findings(outcome: FileOutcome, verbosity: int) -> None:
    """verbosity -1 (quiet): errors only; 0: changes, skips and errors, plus notes for files
    named on the command line; 1 (verbose): everything, and the file's status."""
    for finding in sorted(outcome.findings, key=lambda f: (f.line, f.col, f.code)):
        severity = finding.severity
        shown = (
            severity is Severity.ERROR
            or (verbosity >= 0 and severity is not Severity.NOTE)
            or (severity is Severity.NOTE and (verbosity >= 1 or outcome.explicit))
        )
        if verbosity >= 0 and severity is Severity.NOTE and not outcome.explicit:
            shown = verbosity >= 1
        if shown:
            click.echo(finding.format(outcome.path), err=True)
    if verbosity >= 1:
        click.echo(f"{outcome.path}: {outcome.status.value}", err=True)


def print_diff(outcome: FileOutcome) -> None:
    before = outcome.before.decode("utf-8", "replace").splitlines(keepends=True)
    after = outcome.after.decode("utf-8", "replace").splitlines(keepends=True)
    for line in difflib.unified_diff(before, after, outcome.path, outcome.path):
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        if line.startswith(("+++", "---")):
            click.echo(click.style(line, bold=True), nl=False)
        elif line.startswith("@@"):
            click.echo(click.style(line, fg="cyan"), nl=False)
        elif line.startswith("+"):
            click.echo(click.style(line, fg="green"), nl=False)
        elif line.startswith("-"):
            click.echo(click.style(line, fg="red"), nl=False)
        else:
            click.echo(line, nl=False)


def summary(outcomes: list[FileOutcome], would: bool) -> str:
    counts = {status: sum(o.status is status for o in outcomes) for status in Status}
    parts = []
    if counts[Status.CHANGED]:
        verb = "would be rewritten" if would else "rewritten"
        parts.append(f"{_files(counts[Status.CHANGED])} {verb}")
    if counts[Status.UNCHANGED]:
        verb = "would be left unchanged" if would else "left unchanged"
        parts.append(f"{_files(counts[Status.UNCHANGED])} {verb}")
    if counts[Status.FAILED]:
        parts.append(f"{_files(counts[Status.FAILED])} failed")
    return ", ".join(parts) if parts else "no Python files found"


def _files(count: int) -> str:
    return f"{count} file" if count == 1 else f"{count} files"
