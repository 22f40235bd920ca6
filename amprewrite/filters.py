"""Which findings to keep: `--select`/`--ignore` and `per-file-ignores` by code prefix, and
the per-line comments (`suppressions`) on a finding's line (of its cell, in a notebook).
Errors are always kept. What these leave out was not changed either (`steering`)."""

from __future__ import annotations

from dataclasses import replace

from amprewrite.catalog import Severity
from amprewrite.findings import Finding
from amprewrite.notebook_cells import cell_of
from amprewrite.options import Options
from amprewrite.runner import FileOutcome
from amprewrite.suppressions import LineCodes, line_codes, options_for, suppressed, wanted


def keep_findings(outcome: FileOutcome, options: Options) -> FileOutcome:
    """The outcome with the findings the user asked not to see taken out (never errors)."""
    chosen = options_for(options, outcome.path)
    comments: dict[int | None, LineCodes] = {}

    def commented(finding: Finding) -> LineCodes:
        cell = cell_of(finding)
        if cell not in comments:
            cells = outcome.cells
            source = outcome.before if cell is None or cells is None else (
                cells.before[cell - 1].encode())
            comments[cell] = line_codes(source)
        return comments[cell]

    kept = [f for f in outcome.findings if f.severity is Severity.ERROR or (
        wanted(f.code, chosen.select, chosen.ignore)
        and not suppressed(commented(f), f.line, f.code))]
    return replace(outcome, findings=kept)
