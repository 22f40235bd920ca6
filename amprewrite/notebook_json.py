"""A notebook file's JSON: read with nbformat, written back by patching cell sources in place.

Only the `"source"` values of changed cells are replaced, each in the style of the file
(indentation, separators, `ensure_ascii`, one string per line as nbformat splits them), so
every other byte stays as it was: key order, outputs, metadata, the final newline. For a
notebook Jupyter wrote (nbformat's `json.dumps(nb, indent=1, sort_keys=True,
ensure_ascii=False)` plus a newline) the result is what nbformat would write for the new
sources; for one another tool wrote, it keeps that tool's layout.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from json.decoder import scanstring  # type: ignore[attr-defined]  # typeshed lacks it
from pathlib import Path

from amprewrite.fileio import UnparsableOutput

_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
_NON_ASCII_ESCAPE = re.compile(r"\\u(?!00[0-7])[0-9a-fA-F]{4}")


class NotebookError(Exception):
    """The file is not a notebook amprewrite can rewrite; the message says why."""


@dataclass(frozen=True)
class Cell:
    """One cell: its type, its source, and where its `"source"` value lies in the text."""

    kind: str  # "code", "markdown", "raw"
    source: str
    start: int  # offsets of the JSON value (a list of strings, or one string)
    end: int


def read_cells(text: str) -> list[Cell]:
    """The cells of a notebook (nbformat 4), in order; NotebookError when it is not one."""
    import nbformat  # imported here: only runs that meet a notebook pay for it

    if not text.lstrip().startswith("{"):
        raise NotebookError("not a Jupyter notebook (not a JSON object)")
    try:  # no schema validation: only cell sources change, whatever else the file holds
        notebook = nbformat.reader.reads(text)
    except Exception as exc:  # nbformat raises ValueError, NBFormatError, ValidationError, ...
        raise NotebookError(f"not a Jupyter notebook ({_reason(exc)})") from exc
    version = notebook.get("nbformat")
    if not isinstance(version, int):
        raise NotebookError("not a Jupyter notebook (no nbformat version)")
    if version != 4:
        raise NotebookError(f"nbformat {version} notebook: amprewrite reads nbformat 4 (open "
                            "and save it in Jupyter to convert it)")
    spans = _source_spans(text)
    cells = notebook.get("cells")
    if not isinstance(cells, list) or len(cells) != len(spans):
        raise NotebookError("not a Jupyter notebook (no list of cells)")
    found = []
    for cell, (start, end) in zip(cells, spans, strict=True):
        kind, source = cell.get("cell_type"), cell.get("source")
        if not isinstance(kind, str) or not isinstance(source, str) or start < 0:
            raise NotebookError("not a Jupyter notebook (a cell without a type or a source)")
        found.append(Cell(kind, source, start, end))
    return found


def _reason(exc: Exception) -> str:
    """nbformat's message, or the JSON error's (with its position) that nbformat wraps."""
    cause = exc.__cause__ if isinstance(exc.__cause__, ValueError) else exc
    message = str(cause).strip()
    return message.splitlines()[0][:200] if message else type(cause).__name__


def _source_spans(text: str) -> list[tuple[int, int]]:
    """Offsets of each cell's `"source"` value ((-1, -1) when a cell has none)."""
    top = _skip(text, 0)
    members = dict(_members(text, top)) if text[top:top + 1] == "{" else {}
    if "cells" not in members or text[members["cells"][0]] != "[":
        return []
    spans = []
    for start, _ in _elements(text, members["cells"][0]):
        fields = dict(_members(text, start)) if text[start] == "{" else {}
        spans.append(fields.get("source", (-1, -1)))
    return spans


def _skip(text: str, index: int) -> int:
    match = _SPACE.match(text, index)
    return match.end() if match is not None else index


def _value_end(text: str, index: int) -> int:
    return _DECODER.raw_decode(text, index)[1]


def _members(text: str, index: int) -> list[tuple[str, tuple[int, int]]]:
    """The members of the object at `index`: each key and its value's offsets."""
    found = []
    index = _skip(text, index + 1)
    while text[index] != "}":
        key, index = scanstring(text, index + 1)
        index = _skip(text, _skip(text, index) + 1)  # past the colon
        end = _value_end(text, index)
        found.append((key, (index, end)))
        index = _skip(text, end)
        if text[index] == ",":
            index = _skip(text, index + 1)
    return found


def _elements(text: str, index: int) -> list[tuple[int, int]]:
    """The offsets of each value of the array at `index`."""
    found = []
    index = _skip(text, index + 1)
    while text[index] != "]":
        end = _value_end(text, index)
        found.append((index, end))
        index = _skip(text, end)
        if text[index] == ",":
            index = _skip(text, index + 1)
    return found


def patch_sources(text: str, cells: list[Cell], new: dict[int, str]) -> str:
    """`text` with the source of each cell index in `new` replaced, in the file's style."""
    style = _Style.of(text)
    pieces, done = [], 0
    for index in sorted(new, key=lambda i: cells[i].start):
        cell = cells[index]
        pieces += [text[done:cell.start], style.dump(text, cell, new[index])]
        done = cell.end
    return "".join([*pieces, text[done:]])


@dataclass(frozen=True)
class _Style:
    """How the file writes JSON: the indentation unit (None: on one line), the separator
    between items, and whether non-ASCII characters are escaped."""

    unit: str | None
    item_separator: str
    ensure_ascii: bool

    @classmethod
    def of(cls, text: str) -> _Style:
        head = re.match(r"\s*\{(\s*)\"", text)
        gap = head[1] if head is not None else "\n "
        unit = gap.rpartition("\n")[2] if "\n" in gap else None
        separator = "," if unit is not None or re.search(r'",\s', text) is None else ", "
        escaped = text.isascii() and _NON_ASCII_ESCAPE.search(text) is not None
        return cls(unit, separator, escaped)

    def dump(self, text: str, cell: Cell, source: str) -> str:
        """The new `"source"` value: one string per line when the file has a list there."""
        value: str | list[str] = source if text[cell.start] == '"' else source.splitlines(True)
        dumped = json.dumps(value, indent=self.unit, ensure_ascii=self.ensure_ascii,
                            separators=(self.item_separator, ": "))
        line_start = text.rfind("\n", 0, cell.start) + 1
        base = re.match(r"[ \t]*", text[line_start:])[0]  # type: ignore[index]
        return dumped.replace("\n", "\n" + base) if self.unit is not None else dumped


def source_line(text: str, cell: Cell, line: int) -> int:
    """The line of the file that shows the 1-based `line` of the cell's source (the line of
    its string in the list, else of the value)."""
    offset = cell.start
    if text[cell.start] == "[":
        elements = _elements(text, cell.start)
        if elements:
            offset = elements[min(line, len(elements)) - 1][0]
    return text.count("\n", 0, offset) + 1


def check_json(path: Path, data: bytes) -> None:
    """A rewritten notebook must still be JSON (`UnparsableOutput` otherwise)."""
    try:
        json.loads(data)
    except ValueError as exc:
        raise UnparsableOutput(f"the rewritten notebook is not JSON ({exc})") from exc
