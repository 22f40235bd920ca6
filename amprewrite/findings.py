"""Findings: every change and every site left alone, with a stable code.

Codes are declared in `amprewrite.catalog` by the modules that emit them; the file-level
outcomes (nothing to do, already mixed precision, cannot parse, cannot process) are declared
here, since the engine and the runner report them.
"""

from __future__ import annotations

from dataclasses import dataclass

from amprewrite.catalog import ERROR, NOTE, SKIP, Severity, declare
from amprewrite.code_index import severity_of

NOTHING_TO_DO = declare(
    "AMP001", NOTE, "no training step or model forward pass found",
    "Nothing to do: the file is left byte-identical.",
    why=(
        "The file has no backward pass, optimizer step, model forward pass or custom "
        "autograd Function for the rewrite to act on (or it mentions neither torch nor "
        "a training framework)."
    ),
    example=(
        "def add(a, b):\n"
        "    return a + b"
    ),
)

ALREADY_MIXED_PRECISION = declare(
    "AMP002", NOTE, "file already uses mixed precision",
    "Left unchanged so that running the tool twice changes nothing. Only when training already "
    "runs it: a grad scaler, an apex.amp call, or an autocast over gradient-computing code (see "
    "AMP144, AMP145).",
    why=(
        "The training step already runs under mixed precision: a grad scaler, an "
        "apex.amp call or an autocast around gradient-computing code."
    ),
    example=(
        "scaler = torch.amp.GradScaler()\n"
        "with torch.autocast(\"cuda\"):\n"
        "    loss = criterion(model(x), y)\n"
        "scaler.scale(loss).backward()"
    ),
)

CANNOT_PARSE = declare(
    "AMP003", ERROR, "file cannot be parsed",
    "Fix the syntax error (amprewrite reads Python 3 source) and run again.",
    why=(
        "CPython's parser or compiler refuses the source (a syntax error, or code the "
        "grammar allows but the compiler rejects, such as `return` at module level)."
    ),
    example=(
        "import torch\n"
        "x = (1,\n"
        "# train.py:2:5: AMP003 cannot parse: '(' was never closed; file left unchanged"
    ),
)

CANNOT_PROCESS = declare(
    "AMP004", ERROR, "file cannot be read or written",
    "Check the path, its permissions and its encoding.",
    why=(
        "The file could not be read (missing, unreadable, not a regular file, an "
        "unknown encoding, binary) or its rewrite could not be written (read-only, a "
        "full disk, changed on disk meanwhile)."
    ),
    example=(
        "$ chmod a-w train.py && amprewrite train.py\n"
        "# train.py:1:1: AMP004 cannot write: permission denied (read-only file)"
    ),
)

CELL_CANNOT_PARSE = declare(
    "AMP005", SKIP, "notebook cell cannot be parsed",
    "The cell is left unchanged and out of the analysis; the rest of the notebook is still "
    "rewritten. Fix its syntax (IPython's magics, `!` commands and `?` help are understood; a "
    "cell whose cell magic runs something other than Python, such as `%%bash`, is skipped "
    "without a finding).",
    why=(
        "A code cell of a notebook does not parse as Python, even with its IPython "
        "syntax (magics, `!` commands, `?` help) masked."
    ),
    example=(
        "# a notebook cell:\n"
        "for x in\n"
        "# train.ipynb:cell 3:1:9: AMP005 ... the cell is left unchanged"
    ),
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
