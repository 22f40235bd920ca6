"""The codemod for one source: read -> parse -> analyse -> plan -> transform -> render.

INTERFACE STUB: the real pipeline is being written; the signature below is fixed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from amprewrite.findings import Finding
from amprewrite.options import Options


@dataclass
class RewriteResult:
    source: bytes  # the new source; identical bytes when nothing changed
    findings: list[Finding] = field(default_factory=list)

    changed: bool = False


class RewriteError(Exception):
    """The source could not be rewritten; `finding` says why (AMP003 or AMP004)."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.message)
        self.finding = finding


def rewrite_source(source: bytes, options: Options) -> RewriteResult:
    """Rewrite one Python source (bytes, any PEP 263 encoding) for `options`."""
    try:
        cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise RewriteError(Finding("AMP003", exc.raw_line, exc.raw_column + 1, str(exc))) from exc
    return RewriteResult(source, [Finding("AMP001", 1, 1, "no training step found")], False)
