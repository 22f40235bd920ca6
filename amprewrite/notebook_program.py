"""A notebook's code cells as one program: joined with a marker line between two cells, and
the rewritten program cut back into cells at its markers.

What the rewrite adds after a statement stays in that statement's cell (the scaler after the
optimizer). An autocast block it opens across cells (a forward in one cell, its loss in the
next) is reopened in each cell it spans, the expression a cell ends with (which Jupyter
displays) kept after the block. A marker dropped with a statement the rewrite replaced (apex's
`amp.initialize(...)` alone in its cell) is put back where the replacement begins.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from amprewrite.ipython_syntax import physical_lines

_AUTOCAST_BLOCK = re.compile(r"with [\w.]*autocast\(.*\):")


class SplitError(Exception):
    """The rewritten program cannot be cut back into cells; the message says why."""


@dataclass
class Piece:
    """A code cell in the program: its index among the notebook's cells, its masked source."""

    index: int
    masked: str  # ends with a newline
    first_line: int = 0  # where it starts in the program


@dataclass
class Program:
    """The pieces joined into one source, a marker comment line between two pieces; `prefix`
    occurs nowhere in the notebook, so no line of it can be taken for a marker."""

    pieces: list[Piece]
    prefix: str
    markers: list[str] = field(default_factory=list)
    text: str = ""

    def __post_init__(self) -> None:
        self.markers = [f"# {self.prefix}cell{n}" for n in range(1, len(self.pieces))]
        lines, chunks = 1, []
        for number, piece in enumerate(self.pieces):
            if number:
                chunks.append(self.markers[number - 1] + "\n")
                lines += 1
            piece.first_line = lines
            chunks.append(piece.masked)
            lines += len(physical_lines(piece.masked))
        self.text = "".join(chunks)

    def piece_at(self, line: int) -> tuple[Piece, int] | None:
        """The piece that holds `line` of the program, and the line within it."""
        for piece in reversed(self.pieces):
            if line >= piece.first_line:
                last = len(physical_lines(piece.masked))
                return piece, min(line - piece.first_line + 1, max(last, 1))
        return None

    def split(self, rewritten: str) -> list[str]:
        """The rewritten program cut at its markers, one part per piece."""
        lines = self._with_lost_markers(physical_lines(rewritten))
        parts: list[list[str]] = [[]]
        for number, line in enumerate(lines):
            if len(parts) <= len(self.markers) and line.strip() == self.markers[len(parts) - 1]:
                width = len(line) - len(line.lstrip())
                headers = _open_blocks(lines[:number], width) if width else []
                if len(headers) == 1:
                    parts[-1] = _display_after_block(parts[-1], width)
                parts.append(headers)
            else:
                parts[-1].append(line)
        if len(parts) != len(self.pieces):
            raise SplitError("a cell boundary was lost")
        return ["".join(part) for part in parts]

    def _with_lost_markers(self, lines: list[str]) -> list[str]:
        """`lines` with each marker the rewrite dropped (with the statement it led) put back
        where that statement's replacement begins."""
        present = {line.strip() for line in lines}
        lost = [marker for marker in self.markers if marker not in present]
        if not lost:
            return lines
        import difflib  # imported here: only a rewrite that replaces a cell's first statement

        original = physical_lines(self.text)
        opcodes = difflib.SequenceMatcher(None, original, lines, autojunk=False).get_opcodes()
        inserts: dict[int, str] = {}
        for marker in lost:
            at = next(i for i, line in enumerate(original) if line.strip() == marker)
            where = [j1 for tag, i1, i2, j1, _ in opcodes
                     if i1 <= at < i2 and (at == i1 or tag == "delete")]
            if not where:
                raise SplitError(f"the rewrite replaced code across the boundary `{marker}`")
            inserts[where[0]] = marker + "\n"
        merged = []
        for j, line in enumerate([*lines, ""]):
            merged += [inserts[j]] if j in inserts else []
            merged += [line] if line else []
        return merged


def _open_blocks(before: list[str], width: int) -> list[str]:
    """The header lines of the autocast blocks open at indentation `width` after `before`,
    outermost first, to reopen them in the next cell."""
    headers: list[str] = []
    for line in reversed(before):
        body = line.strip()
        indent = len(line) - len(line.lstrip())
        if not body or body.startswith("#") or indent >= width:
            continue
        if _AUTOCAST_BLOCK.fullmatch(body) is None:
            raise SplitError(f"the rewrite opened a block across cells (`{body}`)")
        headers.append(line)
        width = indent
        if not indent:
            return headers[::-1]
    raise SplitError("a block across cells has no header")


def _display_after_block(lines: list[str], width: int) -> list[str]:
    """A cell's part that ends inside an autocast block the next cell reopens, with the
    expression statements that end it (`outputs.shape`, which Jupyter displays; an IPython
    line) moved after the block: they define nothing a loss could need, and inside a block
    Jupyter would not display them."""
    try:
        tree = ast.parse("".join(lines))
    except SyntaxError:
        return lines
    block = tree.body[-1] if tree.body else None
    if not isinstance(block, ast.With):
        return lines
    kept = len(block.body)
    while kept > 1 and isinstance(block.body[kept - 1], ast.Expr):
        kept -= 1
    end = block.body[kept - 1].end_lineno or 0
    shift = width - block.col_offset
    moved = lines[end:]
    if kept == len(block.body) or any(line[:shift].strip() for line in moved):
        return lines
    return lines[:end] + [line[shift:] if line.strip() else line for line in moved]
