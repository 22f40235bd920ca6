"""Findings: every change and every site left alone, with a stable code.

Codes are declared in `amprewrite.catalog` by the modules that emit them; the file-level
outcomes (nothing to do, already mixed precision, cannot parse, cannot process) are declared
here, since the engine and the runner report them.
"""

from __future__ import annotations

from dataclasses import dataclass

from amprewrite.catalog import ERROR, NOTE, SKIP, Severity, declare, severity_of

NOTHING_TO_DO = declare(
    "AMP001", NOTE, "no training step or model forward pass found",
    "Nothing to do: the file is left byte-identical.",
)

ALREADY_MIXED_PRECISION = declare(
    "AMP002", NOTE, "file already uses mixed precision",
    "Left unchanged so that running the tool twice changes nothing. Only when training already "
    "runs it: a grad scaler, an apex.amp call, or an autocast over gradient-computing code (see "
    "AMP144, AMP145).",
)

CANNOT_PARSE = declare(
    "AMP003", ERROR, "file cannot be parsed",
    "Fix the syntax error (amprewrite reads Python 3 source) and run again.",
)

CANNOT_PROCESS = declare(
    "AMP004", ERROR, "file cannot be read or written",
    "Check the path, its permissions and its encoding.",
)

CELL_CANNOT_PARSE = declare(
    "AMP005", SKIP, "notebook cell cannot be parsed",
    "The cell is left unchanged and out of the analysis; the rest of the notebook is still "
    "rewritten. Fix its syntax (IPython's magics, `!` commands and `?` help are understood; a "
    "cell whose cell magic runs something other than Python, such as `%%bash`, is skipped "
    "without a finding).",
)


@dataclass(frozen=True)
class Finding:
    """One reported site: `path:line:col: code message`."""

    code: str
    line: int
    col: int
    message: str

    @property
    def severity(self) -> Severity:
        return severity_of(self.code)

    def format(self, path: str) -> str:
        return f"{path}:{self.line}:{self.col}: {self.code} {self.message}"
