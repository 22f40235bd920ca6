"""Which files to process: explicit paths always; directories walked for `*.py`, sorted."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

# Never descended into when walking a directory (hidden directories are skipped as well, and so
# is any directory holding a `pyvenv.cfg`, i.e. a virtual environment under any name).
SKIPPED_DIRECTORIES = frozenset({
    "__pycache__", "__pypackages__", "site-packages", "node_modules",
    "venv", ".venv", ".tox", ".nox", ".git", ".hg", ".svn", "build", "dist", "_build",
    "buck-out", ".eggs", ".mypy_cache", ".ruff_cache", ".pytest_cache",
})


class Target(NamedTuple):
    path: Path
    explicit: bool  # named on the command line, not found by walking a directory


def discover(paths: list[Path]) -> list[Target]:
    """Files to process, in a deterministic order, each once.

    A path named explicitly is processed whatever its suffix; a directory contributes its
    `*.py` files in sorted order. A file reached twice keeps its first position and counts as
    explicit if it was ever named explicitly.
    """
    found: dict[Path, Target] = {}
    for path in paths:
        walked = path.is_dir()
        for candidate in _walk(path) if walked else [path]:
            key = candidate.resolve()
            if key not in found:
                found[key] = Target(candidate, not walked)
            elif not walked:
                found[key] = found[key]._replace(explicit=True)
    return list(found.values())


def skipped(directory: Path) -> bool:
    """Whether walking leaves `directory` out."""
    name = directory.name
    return (
        name.startswith(".")
        or name in SKIPPED_DIRECTORIES
        or name.endswith(".egg-info")
        or (directory / "pyvenv.cfg").is_file()
    )


def _walk(directory: Path) -> list[Path]:
    files: list[Path] = []
    for root, dirnames, filenames in os.walk(directory):  # symlinked directories not followed
        dirnames[:] = sorted(d for d in dirnames if not skipped(Path(root) / d))
        files.extend(Path(root) / name for name in filenames if name.endswith(".py"))
    return sorted(files)
