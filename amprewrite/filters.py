"""Which findings to keep: `--select`/`--ignore` by code prefix, and `# amprewrite: ignore`
comments (`# amprewrite: ignore[AMP110]`, or every code without brackets) on a line (of the
finding's cell, in a notebook)."""

from __future__ import annotations

import re
from dataclasses import replace

from amprewrite.catalog import Severity
from amprewrite.findings import Finding
from amprewrite.notebook_cells import cell_of
from amprewrite.runner import FileOutcome

_MARKER = re.compile(rb"#\s*amprewrite:\s*ignore(?:\[([A-Z0-9,\s]+)\])?")


def keep_findings(
    outcome: FileOutcome, select: tuple[str, ...], ignore: tuple[str, ...]
) -> FileOutcome:
    """The outcome with the findings the user asked not to see taken out (never errors)."""
    comments: dict[int | None, dict[int, set[str] | None]] = {}

    def suppressed(finding: Finding) -> dict[int, set[str] | None]:
        cell = cell_of(finding)
        if cell not in comments:
            cells = outcome.cells
            source = outcome.before if cell is None or cells is None else (
                cells.before[cell - 1].encode())
            comments[cell] = _suppressions(source)
        return comments[cell]

    kept = [f for f in outcome.findings if _wanted(f, select, ignore, suppressed(f))]
    return replace(outcome, findings=kept)


def _wanted(
    finding: Finding, select: tuple[str, ...], ignore: tuple[str, ...],
    suppressed: dict[int, set[str] | None],
) -> bool:
    if finding.severity is Severity.ERROR:
        return True
    if select and not finding.code.startswith(select):
        return False
    if ignore and finding.code.startswith(ignore):
        return False
    if finding.line in suppressed:
        codes = suppressed[finding.line]
        return codes is not None and finding.code not in codes
    return True


def _suppressions(source: bytes) -> dict[int, set[str] | None]:
    """Line -> the codes its comment ignores (None: every code)."""
    found: dict[int, set[str] | None] = {}
    if b"amprewrite:" not in source:
        return found
    for number, line in enumerate(source.splitlines(), start=1):
        match = _MARKER.search(line)
        if match is not None:
            codes = match.group(1)
            found[number] = (None if codes is None else
                             {c.strip() for c in codes.decode().split(",") if c.strip()})
    return found
