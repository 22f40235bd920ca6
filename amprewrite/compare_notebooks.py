"""`amprewrite compare NB.ipynb`: a notebook compared as the script its code cells make.

A Jupyter kernel cannot be stopped by the runtime's step cap (it catches the `SystemExit`), so
a notebook is not run through `jupyter nbconvert --execute` or papermill: its code cells run in
a Python process of their own (`amprewrite.notebook_script`), with matplotlib drawing to no
screen.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path


def is_notebook_path(command: Sequence[str]) -> bool:
    """`compare NB.ipynb`: a notebook named alone, as the command."""
    return len(command) == 1 and command[0].endswith(".ipynb") and Path(command[0]).is_file()


def script_command(notebook: str) -> list[str]:
    """The command that runs the notebook's code cells as one script."""
    return [sys.executable, "-m", "amprewrite.notebook_script", notebook]


NOTEBOOK_ENVIRONMENT = {"MPLBACKEND": "Agg"}  # `plt.show()` draws nowhere, as in a kernel


def kernel_run_problem(command: Sequence[str]) -> str | None:
    """Why a command that executes a notebook in a kernel cannot be compared, with the fix."""
    notebook = next((word for word in command if word.endswith(".ipynb")), None)
    if notebook is None or is_notebook_path(command):
        return None
    return (f"`{shlex.join(command)}` runs {notebook} in a Jupyter kernel (or names it with "
            "other words), and a kernel catches the step cap's SystemExit, so the run cannot "
            "be stopped after --steps: run "
            f"`amprewrite compare {shlex.quote(notebook)}` instead, which runs its code cells "
            "as one script")
