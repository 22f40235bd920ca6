"""`python -m amprewrite.notebook_script NB.ipynb`: a notebook's code cells run as one script.

What `amprewrite compare NB.ipynb` runs twice. In a Jupyter kernel the runtime's step cap
(`SystemExit` from `GradScaler.update()`) is caught and shown as an error, and the run goes on
(or fails, under `jupyter nbconvert --execute`); here, as in a script, it ends the run. The
code cells run in order in one namespace, each compiled under its name (`NB.ipynb:cell 5`);
IPython lines (magics, shell escapes, `?` help) are skipped, and so are cells whose cell magic
runs something other than Python (`%%bash`). Only the standard library and amprewrite's own
IPython masking are imported: the cells import torch themselves.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from amprewrite.ipython_syntax import PYTHON_CELL_MAGICS, Masker, cell_magic

_PLACEHOLDER = "__amprewrite_skipped_ipython_line_"


def cells(path: Path) -> list[tuple[int, str]]:
    """The notebook's Python code cells: (number counted from 1 over every cell, source with
    its IPython lines made inert)."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    masker = Masker(_PLACEHOLDER)
    found = []
    for number, cell in enumerate(notebook.get("cells", []), start=1):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        magic = cell_magic(source)
        if magic is not None and magic not in PYTHON_CELL_MAGICS:
            continue
        found.append((number, masker.mask(source)))
    return found


def run(path: Path) -> None:
    """Execute the cells in one `__main__` namespace, from the notebook's directory (as
    Jupyter runs it), as a script would run."""
    name = str(path)
    found = cells(path)
    directory = path.resolve().parent
    os.chdir(directory)
    sys.path.insert(0, str(directory))
    namespace = {"__name__": "__main__"}
    for number, source in found:
        exec(compile(source, f"{name}:cell {number}", "exec"), namespace)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m amprewrite.notebook_script NOTEBOOK.ipynb")
    run(Path(sys.argv[1]))
