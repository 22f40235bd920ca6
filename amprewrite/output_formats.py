"""Machine-readable reports: `--output-format json` and `--output-format github`."""

from __future__ import annotations

import json
from typing import Any

import click

from amprewrite.catalog import Severity
from amprewrite.findings import Finding
from amprewrite.notebook_cells import CellFinding
from amprewrite.report import status_text
from amprewrite.runner import FileOutcome, is_notebook

_GITHUB_LEVEL = {Severity.ERROR: "error", Severity.SKIP: "warning", Severity.CHANGE: "notice",
                 Severity.NOTE: "notice"}


def print_json(
    outcomes: list[FileOutcome], would: bool, summary: str, err: bool = False
) -> None:
    """One JSON document on stdout (stderr with `err`): every file, its status and its
    findings (in a notebook, each with its `cell`: null for a finding on the whole file)."""
    document = {
        "files": [
            {
                "path": outcome.path,
                "status": status_text(outcome.status, would),
                "findings": [_json(f, is_notebook(outcome.path)) for f in outcome.findings],
            }
            for outcome in outcomes
        ],
        "summary": summary,
    }
    click.echo(json.dumps(document, indent=2), err=err)


def _json(finding: Finding, notebook: bool) -> dict[str, Any]:
    shown: dict[str, Any] = {"code": finding.code}
    if notebook:
        shown["cell"] = finding.cell if isinstance(finding, CellFinding) else None
    return shown | {"line": finding.line, "column": finding.col, "message": finding.message,
                    "severity": finding.severity.value}


def print_github(outcomes: list[FileOutcome], err: bool = False) -> None:
    """GitHub Actions workflow commands (on stdout, stderr with `err`): annotations on the pull
    request's diff. A finding in a notebook cell is put on the line of the .ipynb file that
    shows it, its message prefixed `cell 5:3:1: `."""
    for outcome in outcomes:
        for f in outcome.findings:
            message = f.message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
            if isinstance(f, CellFinding):
                where = f"line={f.file_line}"
                message = f"cell {f.cell}:{f.line}:{f.col}: {message}"
            else:
                where = f"line={f.line},col={f.col}"
            click.echo(f"::{_GITHUB_LEVEL[f.severity]} file={outcome.path},{where},"
                       f"title={f.code}::{message}", err=err)
