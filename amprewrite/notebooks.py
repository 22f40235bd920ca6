"""Jupyter notebooks: the code cells rewritten as one program, then put back cell by cell.

The code cells, in order, are one program (the optimizer built in one cell, the loop in
another, the checkpoint in a third): their sources, IPython syntax masked (`ipython_syntax`),
are joined and rewritten by the engine as a whole, and the result is cut back into cells
(`notebook_program`); only the changed sources are patched into the file (`notebook_json`).
A cell that does not parse, or that runs something other than Python (`%%bash`), stays out
of the program, unchanged. Findings name their cell, counted from 1 over every cell as Jupyter
shows them (markdown cells too: `nb.cells[N - 1]`), with the line and column in the cell.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass, replace

from amprewrite import engine
from amprewrite.catalog import Severity
from amprewrite.engine import RewriteError
from amprewrite.findings import CANNOT_PARSE, CANNOT_PROCESS, CELL_CANNOT_PARSE, Finding
from amprewrite.ipython_syntax import PYTHON_CELL_MAGICS, Masker, cell_magic
from amprewrite.notebook_cells import CellFinding, NotebookCells, position
from amprewrite.notebook_json import Cell, NotebookError, patch_sources, read_cells, source_line
from amprewrite.notebook_program import Piece, Program, SplitError
from amprewrite.options import Options

_LEFT_ALONE = "file left unchanged"


@dataclass
class NotebookResult:
    """The rewritten notebook file, its findings and its cells."""

    source: bytes
    findings: list[Finding]
    cells: NotebookCells
    changed: bool = False


def rewrite_notebook(source: bytes, options: Options) -> NotebookResult:
    """Rewrite a notebook file's bytes; RewriteError when the file as a whole cannot be."""
    try:
        text = source.decode("utf-8")
        cells = read_cells(text)
    except UnicodeDecodeError as exc:
        raise RewriteError(Finding(CANNOT_PROCESS, 1, 1, f"cannot decode: a notebook is UTF-8 "
                                   f"JSON; {_LEFT_ALONE}")) from exc
    except NotebookError as exc:
        raise RewriteError(Finding(CANNOT_PROCESS, 1, 1, f"{exc}; {_LEFT_ALONE}")) from exc
    masker = Masker(_unused_prefix(text) + "ipython")
    findings: list[Finding] = []
    pieces = _pieces(cells, masker, findings)
    program, result = _rewrite(pieces, _unused_prefix(text), options, findings)
    findings = [_on_file(f, text, cells) for f in findings]
    after = [cell.source for cell in cells]
    if result.source != program.text.encode():
        try:
            parts = program.split(result.source.decode())
        except SplitError as exc:
            raise _cannot_split(str(exc)) from exc
        for piece, part in zip(program.pieces, parts, strict=True):
            after[piece.index] = _restore(piece, part, masker, cells[piece.index].source)
    findings += [_in_cell(f, program, text, cells) for f in result.findings]
    before = tuple(cell.source for cell in cells)
    new = {index: src for index, src in enumerate(after) if src != before[index]}
    rewritten = patch_sources(text, cells, new).encode() if new else source
    findings.sort(key=position)
    return NotebookResult(rewritten, findings, NotebookCells(before, tuple(after)), bool(new))


def _unused_prefix(text: str) -> str:
    """A name prefix that occurs nowhere in the notebook, for markers and placeholders."""
    prefix = "__amprewrite_"
    while prefix in text:
        prefix += "_"
    return prefix


def _pieces(cells: list[Cell], masker: Masker, findings: list[Finding]) -> list[Piece]:
    """The code cells that are Python, masked; an AMP005 finding for each that cannot parse."""
    pieces = []
    for index, cell in enumerate(cells):
        magic = cell_magic(cell.source)
        if cell.kind != "code" or not cell.source.strip() or (
                magic is not None and magic not in PYTHON_CELL_MAGICS):
            continue
        masked = masker.mask(cell.source)
        masked += "" if masked.endswith(("\n", "\r")) else "\n"
        error = _syntax_error(masked)
        if error is not None:
            findings.append(_unparsable(cells, index, error))
        elif not _only_ipython(masked, masker):  # `!pip install ...`: nothing to analyse
            pieces.append(Piece(index, masked))
    return pieces


def _only_ipython(masked: str, masker: Masker) -> bool:
    """Whether a masked cell holds nothing but IPython lines (and comments): left out of the
    program, so that the rewrite's imports go into the first cell with code."""
    statements = ast.parse(masked).body
    return all(isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
               and node.value.value in masker.originals for node in statements)


def _syntax_error(source: str) -> SyntaxError | None:
    """Why CPython refuses `source` (as the engine's final check would), or None."""
    try:
        with warnings.catch_warnings():  # e.g. SyntaxWarning: invalid escape sequence
            warnings.simplefilter("ignore")
            compile(source, "<cell>", "exec", dont_inherit=True)
    except SyntaxError as error:
        return error
    except ValueError as error:  # NUL characters
        return SyntaxError(str(error), ("<cell>", 1, 1, ""))
    return None


def _unparsable(cells: list[Cell], index: int, error: SyntaxError) -> Finding:
    line, col = error.lineno or 1, error.offset or 1
    return CellFinding(CELL_CANNOT_PARSE, line, col, f"cannot parse: {error.msg}; cell left "
                       "unchanged", index + 1)


def _rewrite(
    pieces: list[Piece], prefix: str, options: Options, findings: list[Finding]
) -> tuple[Program, engine.RewriteResult]:
    """The program of `pieces` rewritten; a cell the program cannot hold (CPython or libcst
    refuse it there: a `from __future__` import after other code) is taken out, with AMP005."""
    kept = {piece.index: piece for piece in pieces}
    while True:
        program = Program(list(kept.values()), prefix)
        error = _syntax_error(program.text)
        if error is None:
            try:
                return program, engine.rewrite_source(program.text.encode(), options)
            except RewriteError as exc:
                if exc.finding.code != CANNOT_PARSE:
                    raise RewriteError(_file_level(exc.finding, program)) from exc
                line, col, why = exc.finding.line, exc.finding.col, exc.finding.message
        else:
            line, col, why = error.lineno or 1, error.offset or 1, f"cannot parse: {error.msg}"
        where = program.piece_at(line)
        if where is None:
            raise RewriteError(Finding(CANNOT_PROCESS, 1, 1, f"internal error ({why}); "
                                       f"{_LEFT_ALONE}, please report it"))
        piece, line = where
        findings.append(CellFinding(CELL_CANNOT_PARSE, line, col, f"{why.partition('; ')[0]}; "
                                    "cell left unchanged", piece.index + 1))
        del kept[piece.index]


def _file_level(finding: Finding, program: Program) -> Finding:
    """An error of the engine on the whole program, with its cell when it names a line."""
    where = program.piece_at(finding.line) if finding.line > 1 else None
    if where is None:
        return finding
    piece, line = where
    return CellFinding(finding.code, line, finding.col, finding.message, piece.index + 1)


def _cannot_split(why: str) -> RewriteError:
    return RewriteError(Finding(CANNOT_PROCESS, 1, 1, f"internal error: the rewrite cannot be "
                                f"split back into cells ({why}); {_LEFT_ALONE}, please "
                                "report it"))


def _restore(piece: Piece, part: str, masker: Masker, original: str) -> str:
    """A cell's new source: its part of the rewritten program, IPython lines restored, with
    the cell's own leading and trailing newlines."""
    if _syntax_error(part) is not None:
        raise _cannot_split(f"cell {piece.index + 1} would not parse")
    restored = masker.unmask(part, masker.names_in(piece.masked))
    if restored is None:
        raise _cannot_split(f"an IPython line of cell {piece.index + 1} was lost")
    body = original.strip("\r\n")
    head = original[:original.index(body)] if body else ""
    return head + restored.strip("\r\n") + original[len(head) + len(body):]


def _in_cell(finding: Finding, program: Program, text: str, cells: list[Cell]) -> Finding:
    """An engine finding on the program as one on its cell (a note on the whole file at the
    first line stays on the file)."""
    where = program.piece_at(finding.line)
    if where is None or (finding.severity is Severity.NOTE and (finding.line, finding.col) == (
            1, 1)):
        return finding
    piece, line = where
    message = _AT_LINE.sub(lambda match: _at_cell(match, program), finding.message)
    return _on_file(CellFinding(finding.code, line, finding.col, message, piece.index + 1),
                    text, cells)


_AT_LINE = re.compile(r"\bat line (\d+)\b")  # a message naming another finding's line


def _at_cell(match: re.Match[str], program: Program) -> str:
    """`at line 15` of the program as `at cell 3:8`, where the line is in a cell."""
    where = program.piece_at(int(match[1]))
    return match[0] if where is None else f"at cell {where[0].index + 1}:{where[1]}"


def _on_file(finding: Finding, text: str, cells: list[Cell]) -> Finding:
    """`finding` with the line of the file that shows it, when it is in a cell."""
    if not isinstance(finding, CellFinding):
        return finding
    return replace(finding, file_line=source_line(text, cells[finding.cell - 1], finding.line))

