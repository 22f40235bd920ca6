"""Which files to process: explicit paths always; directories walked for `*.py` and `*.ipynb`
(the `include` pattern), sorted, honouring `.gitignore` files and the `exclude` /
`extend-exclude` patterns."""

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


# The files a directory walk takes, searched in the `/`-separated path (as black's --include):
# Python sources and Jupyter notebooks.
DEFAULT_INCLUDE = r"\.(py|ipynb)$"


class Target(NamedTuple):
    path: Path
    explicit: bool  # named on the command line, not found by walking a directory


class Discovery(NamedTuple):
    targets: list[Target]
    excluded: int  # paths left out by `excludes` or `.gitignore` (files and directories)


def discover(paths: list[Path], excludes: tuple[re.Pattern[str], ...] = ()) -> list[Target]:
    """Files to process, in a deterministic order, each once (see `find_targets`)."""
    return find_targets(paths, excludes).targets


def find_targets(
    paths: list[Path],
    excludes: tuple[re.Pattern[str], ...] = (),
    force_exclude_root: Path | None = None,
    include: re.Pattern[str] | None = None,
) -> Discovery:
    """Files to process, in a deterministic order, each once, and how many paths were left out.

    A path named explicitly is processed whatever its suffix; a directory contributes the
    files `include` matches (default DEFAULT_INCLUDE: `*.py` and `*.ipynb`) in sorted order,
    minus what `.gitignore` files and `excludes` leave out (`include` and `excludes` are
    regular expressions searched in the `/`-separated path relative to the walked directory,
    with a leading `/`, as black does). With `force_exclude_root` (`--force-exclude`), the
    `excludes` also apply to paths named explicitly, relative to that directory (as black and
    ruff do: pre-commit names every staged file). A file reached twice keeps its first
    position and counts as explicit if it was ever named explicitly.
    """
    found: dict[Path, Target] = {}
    excluded = 0
    for path in paths:
        if force_exclude_root is not None and _forced_out(path, force_exclude_root, excludes):
            excluded += 1
            continue
        walked = path.is_dir()
        if walked:
            candidates, left_out = _walk(path, excludes, include or re.compile(DEFAULT_INCLUDE))
            excluded += left_out
        else:
            candidates = [path]
        for candidate in candidates:
            key = candidate.resolve()
            if key not in found:
                found[key] = Target(candidate, not walked)
            elif not walked:
                found[key] = found[key]._replace(explicit=True)
    return Discovery(list(found.values()), excluded)


def _forced_out(path: Path, root: Path, excludes: tuple[re.Pattern[str], ...]) -> bool:
    """Whether an explicitly named path matches `excludes`, taken relative to `root` (or
    absolute when outside it), with a leading `/` and a trailing one for a directory."""
    resolved = path.resolve()
    try:
        shown = "/" + resolved.relative_to(root.resolve()).as_posix()
    except ValueError:
        shown = resolved.as_posix()
    shown += "/" if path.is_dir() else ""
    return any(pattern.search(shown) for pattern in excludes)


def skipped(directory: Path) -> bool:
    """Whether walking leaves `directory` out."""
    name = directory.name
    return (
        name.startswith(".")
        or name in SKIPPED_DIRECTORIES
        or name.endswith(".egg-info")
        or (directory / "pyvenv.cfg").is_file()
    )


def _walk(
    top: Path, excludes: tuple[re.Pattern[str], ...], include: re.Pattern[str]
) -> tuple[list[Path], int]:
    """The files under `top` that `include` matches, and how many files and directories were
    left out."""
    files: list[Path] = []
    excluded = 0
    ignores: list[tuple[Path, pathspec.PathSpec]] = []
    for root, dirnames, filenames in os.walk(top):  # symlinked directories not followed
        here = Path(root)
        if ".gitignore" in filenames:
            lines = (here / ".gitignore").read_text(errors="replace").splitlines()
            ignores.append((here, _gitignore(lines)))

        def shown(path: Path, is_dir: bool) -> str:
            return "/" + path.relative_to(top).as_posix() + ("/" if is_dir else "")

        def left_out(path: Path, is_dir: bool) -> bool:
            relative = shown(path, is_dir)
            if any(pattern.search(relative) for pattern in excludes):
                return True
            return any(_ignored(spec, base, path, is_dir) for base, spec in ignores)

        kept = sorted(d for d in dirnames if not skipped(here / d))
        dirnames[:] = [d for d in kept if not left_out(here / d, True)]
        matching = [here / name for name in filenames
                    if include.search(shown(here / name, False))]
        included = [path for path in matching if not left_out(path, False)]
        files.extend(included)
        excluded += len(kept) - len(dirnames) + len(matching) - len(included)
    return sorted(files), excluded


def _gitignore(lines: list[str]) -> pathspec.PathSpec:
    import pathspec  # imported here: a run on named files starts faster without it

    return pathspec.GitIgnoreSpec.from_lines(lines)


def _ignored(spec: pathspec.PathSpec, base: Path, path: Path, is_dir: bool) -> bool:
    try:
        relative = path.relative_to(base).as_posix()
    except ValueError:
        return False
    return spec.match_file(relative + "/" if is_dir else relative)
