"""Which files to process: explicit paths always; directories walked for `*.py`, sorted."""

from __future__ import annotations

import os
from pathlib import Path

SKIPPED_DIRECTORIES = frozenset({
    "__pycache__", ".git", ".hg", ".svn", ".tox", ".nox", ".venv", "venv", "env",
    "build", "dist", "node_modules", "site-packages", ".mypy_cache", ".ruff_cache",
    ".pytest_cache", ".eggs",
})


def discover(paths: list[Path]) -> list[tuple[Path, bool]]:
    """Files to process, each with whether the user named it explicitly.

    A named file is processed whatever its suffix; a directory contributes its `*.py` files,
    skipping hidden directories and the usual environment and build folders.
    """
    found: list[tuple[Path, bool]] = []
    seen: set[Path] = set()
    for path in paths:
        candidates = _walk(path) if path.is_dir() else [path]
        for candidate in candidates:
            key = candidate.resolve()
            if key not in seen:
                seen.add(key)
                found.append((candidate, not path.is_dir()))
    return found


def _walk(directory: Path) -> list[Path]:
    files: list[Path] = []
    for root, dirnames, filenames in os.walk(directory):
        dirnames[:] = sorted(
            d for d in dirnames if not d.startswith(".") and d not in SKIPPED_DIRECTORIES
            and not d.endswith(".egg-info")
        )
        files.extend(Path(root) / name for name in filenames if name.endswith(".py"))
    return sorted(files)
