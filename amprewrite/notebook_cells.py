"""What the reporters need to know about notebooks, without loading the notebook machinery:
findings that name a cell, and each cell's source before and after the rewrite."""

from __future__ import annotations

from dataclasses import dataclass

from amprewrite.findings import Finding


@dataclass(frozen=True)
class CellFinding(Finding):
    """A finding in a notebook cell: `train.ipynb:cell 5:3:1: AMP101 ...`, its line and
    column within the cell's source."""

    cell: int = 1  # 1-based over every cell of the notebook, markdown included
    file_line: int = 1  # the line of the .ipynb file that shows it (GitHub annotations)

    def format(self, path: str) -> str:
        return f"{path}:cell {self.cell}:{self.line}:{self.col}: {self.code} {self.message}"


@dataclass(frozen=True)
class NotebookCells:
    """Every cell's source before and after the rewrite (index: cell number - 1)."""

    before: tuple[str, ...]
    after: tuple[str, ...]

    def changed(self) -> list[int]:
        """The 1-based numbers of the cells the rewrite changed."""
        pairs = zip(self.before, self.after, strict=True)
        return [number for number, (old, new) in enumerate(pairs, 1) if old != new]


def cell_of(finding: Finding) -> int | None:
    """The cell a finding is in; None for a finding on a whole file."""
    return finding.cell if isinstance(finding, CellFinding) else None


def position(finding: Finding) -> tuple[int, int, int, str]:
    """Where a finding sorts: findings on the whole file first, then by cell, line, column."""
    return cell_of(finding) or 0, finding.line, finding.col, finding.code
