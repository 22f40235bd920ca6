"""Machine-readable reports: `--output-format json`, `github` and `sarif`, and `--statistics`."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import click

from amprewrite import __version__
from amprewrite.catalog import Code, Severity, declared_code, docs_url
from amprewrite.findings import Finding
from amprewrite.notebook_cells import CellFinding
from amprewrite.report import status_text
from amprewrite.runner import FileOutcome, is_notebook

# Every severity's annotation level: what fails the run is an error (a lint finding, a file
# that cannot be processed, and, where nothing is written, a change the run would make)
_GITHUB_LEVEL = {Severity.ERROR: "error", Severity.LINT: "error", Severity.SKIP: "warning",
                 Severity.NOTE: "notice"}


def print_json(
    outcomes: list[FileOutcome], would: bool, summary: str, err: bool = False, *,
    docs_url: str | None,
) -> None:
    """One JSON document on stdout (stderr with `err`): every file, its status and its
    findings (in a notebook, each with its `cell`: null for a finding on the whole file), each
    with the `url` of its code's documentation from the `docs_url` template (null without
    one)."""
    document = {
        "files": [
            {
                "path": outcome.path,
                "status": status_text(outcome.status, would),
                "findings": [_json(f, is_notebook(outcome.path), docs_url)
                             for f in outcome.findings],
            }
            for outcome in outcomes
        ],
        "summary": summary,
    }
    click.echo(json.dumps(document, indent=2), err=err)


def _json(finding: Finding, notebook: bool, template: str | None) -> dict[str, Any]:
    shown: dict[str, Any] = {"code": finding.code}
    if notebook:
        shown["cell"] = finding.cell if isinstance(finding, CellFinding) else None
    return shown | {"line": finding.line, "column": finding.col, "message": finding.message,
                    "severity": finding.severity.value,
                    "url": docs_url(finding.code, template)}


def print_github(outcomes: list[FileOutcome], would: bool, err: bool = False) -> None:
    """GitHub Actions workflow commands (on stdout, stderr with `err`): annotations on the pull
    request's diff, each with its code's title; a change is an error where the run only says
    it `would` make it (`--check`, `--diff`: it fails the run), a notice where it was made. A
    finding in a notebook cell is put on the line of the .ipynb file that shows it, its
    message prefixed `cell 5:3:1: `."""
    for outcome in outcomes:
        for f in outcome.findings:
            line, col, message = _located(f)
            message = _escaped(message)
            title = declared_code(f.code)
            heading = f"{f.code} {title.title}" if title is not None else f.code
            click.echo(f"::{github_level(f.severity, would)} file={_property(outcome.path)},"
                       f"line={line},col={col},endLine={line},endColumn={col},"
                       f"title={_property(heading)}::{message}", err=err)


def _located(finding: Finding) -> tuple[int, int, str]:
    """Where a finding is shown in its file, and its message: a notebook cell's on the line of
    the .ipynb file that shows it, its message prefixed `cell 5:3:1: `."""
    if isinstance(finding, CellFinding):
        return (finding.file_line, 1,
                f"cell {finding.cell}:{finding.line}:{finding.col}: {finding.message}")
    return finding.line, finding.col, finding.message


def github_level(severity: Severity, would: bool) -> str:
    """The annotation level of a finding of `severity`."""
    if severity is Severity.CHANGE:
        return "error" if would else "notice"
    return _GITHUB_LEVEL[severity]


def _escaped(message: str) -> str:
    """A workflow command's message, escaped as GitHub's toolkit does."""
    return message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(value: str) -> str:
    """A workflow command's property value (`file=`, `title=`), escaped as GitHub's toolkit
    does: its `:` and `,` too."""
    return _escaped(value).replace(":", "%3A").replace(",", "%2C")


_SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def print_sarif(
    outcomes: list[FileOutcome], would: bool, err: bool = False, *, docs_url: str | None,
) -> None:
    """One SARIF 2.1.0 log (GitHub code scanning reads it): a rule per code found, with its
    title, why it fires and what to do, and its docs URL (`helpUri`) where the `docs_url`
    template gives one, and a result per finding at its file, line and column (a notebook's
    on the line of the .ipynb file that shows it)."""
    findings = [(outcome, f) for outcome in outcomes for f in outcome.findings]
    codes = sorted({f.code for _, f in findings})
    rules = [sarif_rule(code, docs_url) for code in codes]
    index = {code: i for i, code in enumerate(codes)}
    results = []
    for outcome, f in findings:
        level = github_level(f.severity, would)
        line, col, message = _located(f)
        results.append({
            "ruleId": f.code, "ruleIndex": index[f.code],
            "level": "note" if level == "notice" else level,
            "message": {"text": message},
            "locations": [{"physicalLocation": {
                "artifactLocation": {"uri": outcome.path.replace("\\", "/")},
                "region": {"startLine": line, "startColumn": col}}}],
        })
    log = {"$schema": _SARIF_SCHEMA, "version": "2.1.0", "runs": [{
        "tool": {"driver": {"name": "amprewrite", "version": __version__, "rules": rules}},
        "results": results}]}
    click.echo(json.dumps(log, indent=2), err=err)


def sarif_rule(code: str, template: str | None) -> dict[str, Any]:
    """A code's SARIF rule: its title, why it fires, its help (in text and in Markdown: title,
    why, what to do, and the docs URL) and `helpUri`, where the template gives a URL. A code
    the catalog does not know (a test's) has its id only."""
    declared = declared_code(code)
    if declared is None:
        return {"id": code}
    url = docs_url(declared.id, template)
    rule: dict[str, Any] = {
        "id": code, "name": declared.title,
        "shortDescription": {"text": declared.title},
        "fullDescription": {"text": declared.why},
        "help": {"text": _help_text(declared, url), "markdown": _help_markdown(declared, url)},
        "properties": {"severity": declared.severity.value}}
    if url is not None:
        rule["helpUri"] = url
    return rule


def _help_text(code: Code, url: str | None) -> str:
    """A rule's help as plain text, as `--explain` words it."""
    docs = f"\n\nDocs: {url}" if url is not None else ""
    return (f"{code.id} ({code.severity.value}): {code.title}\n\nWhy it fires: {code.why}"
            f"\n\nWhat to do: {code.advice}{docs}")


def _help_markdown(code: Code, url: str | None) -> str:
    """A rule's help in Markdown (the catalog's text is Markdown already: `code` spans),
    linking the docs URL."""
    docs = f"\n\n[{code.id} in amprewrite's findings]({url})" if url is not None else ""
    return (f"**{code.id}** ({code.severity.value}): {code.title}\n\n**Why it fires:** "
            f"{code.why}\n\n**What to do:** {code.advice}{docs}")


def print_statistics(outcomes: list[FileOutcome], err: bool = False) -> None:
    """How many findings of each code, the most frequent first (as `ruff --statistics`)."""
    counts = Counter(f.code for outcome in outcomes for f in outcome.findings)
    width = len(str(max(counts.values(), default=0)))
    for code, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        declared = declared_code(code)
        title = f"\t{declared.title}" if declared is not None else ""
        click.echo(f"{count:>{width}}\t{code}{title}", err=err)
