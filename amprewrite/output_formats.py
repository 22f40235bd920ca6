"""Machine-readable reports: `--output-format json` and `--output-format github`."""

from __future__ import annotations

import json

import click

from amprewrite.catalog import Severity
from amprewrite.report import in_mood, status_text
from amprewrite.runner import FileOutcome

_GITHUB_LEVEL = {Severity.ERROR: "error", Severity.SKIP: "warning", Severity.CHANGE: "notice",
                 Severity.NOTE: "notice"}


def print_json(outcomes: list[FileOutcome], would: bool, summary: str) -> None:
    """One JSON document on stdout: every file, its status and its findings."""
    document = {
        "files": [
            {
                "path": outcome.path,
                "status": status_text(outcome.status, would),
                "findings": [
                    {"code": f.code, "line": f.line, "column": f.col, "message": f.message,
                     "severity": f.severity.value}
                    for f in outcome.findings
                ],
            }
            for outcome in outcomes
        ],
        "summary": summary,
    }
    click.echo(json.dumps(document, indent=2))


def print_github(outcomes: list[FileOutcome], would: bool) -> None:
    """GitHub Actions workflow commands: annotations on the pull request's diff (changes in
    the conditional when nothing was written)."""
    for outcome in outcomes:
        for f in (in_mood(finding, would) for finding in outcome.findings):
            message = f.message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
            click.echo(f"::{_GITHUB_LEVEL[f.severity]} file={outcome.path},line={f.line},"
                       f"col={f.col},title={f.code}::{message}")
