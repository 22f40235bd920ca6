"""Which files to process: explicit paths always; directories walked for `*.py`, sorted,
honouring `.gitignore` files and the `exclude` / `extend-exclude` patterns."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import pathspec

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


def discover(paths: list[Path], excludes: tuple[re.Pattern[str], ...] = ()) -> list[Target]:
    """Files to process, in a deterministic order, each once.

    A path named explicitly is processed whatever its suffix; a directory contributes its
    `*.py` files in sorted order, minus what `.gitignore` files and `excludes` (regular
    expressions searched in the `/`-separated path relative to the walked directory, with a
    leading `/`, as black does) leave out. A file reached twice keeps its first position and
    counts as explicit if it was ever named explicitly.
    """
    found: dict[Path, Target] = {}
    for path in paths:
        walked = path.is_dir()
        for candidate in _walk(path, excludes) if walked else [path]:
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


def _walk(top: Path, excludes: tuple[re.Pattern[str], ...]) -> list[Path]:
    files: list[Path] = []
    ignores: list[tuple[Path, pathspec.PathSpec]] = []
    for root, dirnames, filenames in os.walk(top):  # symlinked directories not followed
        here = Path(root)
        if ".gitignore" in filenames:
            lines = (here / ".gitignore").read_text(errors="replace").splitlines()
            ignores.append((here, _gitignore(lines)))

        def left_out(path: Path, is_dir: bool) -> bool:
            relative = "/" + path.relative_to(top).as_posix() + ("/" if is_dir else "")
            if any(pattern.search(relative) for pattern in excludes):
                return True
            return any(_ignored(spec, base, path, is_dir) for base, spec in ignores)

        dirnames[:] = sorted(d for d in dirnames
                             if not skipped(here / d) and not left_out(here / d, True))
        files.extend(here / name for name in filenames
                     if name.endswith(".py") and not left_out(here / name, False))
    return sorted(files)


def _gitignore(lines: list[str]) -> pathspec.PathSpec:
    import pathspec  # imported here: a run on named files starts faster without it

    return pathspec.GitIgnoreSpec.from_lines(lines)


def _ignored(spec: pathspec.PathSpec, base: Path, path: Path, is_dir: bool) -> bool:
    try:
        relative = path.relative_to(base).as_posix()
    except ValueError:
        return False
    return spec.match_file(relative + "/" if is_dir else relative)
