"""Which files to process: explicit paths always; directories walked for `*.py` and `*.ipynb`
(the `include` pattern), sorted, honouring `.gitignore` files and the `exclude` /
`extend-exclude` patterns."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from amprewrite.catalog import SKIP, declare
from amprewrite.fileio import read_source, resolved
from amprewrite.findings import CANNOT_PROCESS, Finding

if TYPE_CHECKING:
    import pathspec

GITIGNORE_LINE_IGNORED = declare(
    "AMP006", SKIP, "`.gitignore` line that git ignores",
    "A pattern git cannot use (a lone `!`, a trailing `\\`, a range like `[z-a]`) matches "
    "nothing, for git and for amprewrite; the file's other lines still apply. Fix or remove "
    "the line.",
    why="A line of a `.gitignore` in a walked directory is a pattern git itself cannot use.",
    example=(
        "# .gitignore\n"
        "!\n"
        "build/\n"
        "# the lone `!` is reported; `build/` still applies"
    ),
)

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

SYMLINK_OUTSIDE = declare(
    "AMP007", SKIP, "symlink pointing outside the directory, not followed",
    "A walked directory's `*.py` symlink whose target lies outside it is left alone, as black "
    "does, so that a run on a directory only writes files inside it (and the project stays "
    "within it). Name the link itself on the command line to rewrite its target.",
    why=(
        "A directory walk found a `*.py` symlink whose target lies outside the "
        "directory being rewritten."
    ),
    example=(
        "$ ln -s /elsewhere/train.py project/train.py && amprewrite project\n"
        "# project/train.py: AMP007 symlink pointing outside the directory"
    ),
)


class Target(NamedTuple):
    path: Path
    explicit: bool  # named on the command line, not found by walking a directory


class Problem(NamedTuple):
    """An entry met while walking that the walk could not use as it is: a `.gitignore`, a
    symlink leading outside the walked directory."""

    path: Path
    finding: Finding


class Discovery(NamedTuple):
    targets: list[Target]
    excluded: int  # paths left out by `excludes` or `.gitignore` (files and directories)
    problems: list[Problem]  # each costs its own entry only


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
    problems: list[Problem] = []
    for path in paths:
        if force_exclude_root is not None and forced_out(path, force_exclude_root, excludes):
            excluded += 1
            continue
        walked = path.is_dir()
        if walked:
            candidates, left_out = _walk(path, excludes, include or re.compile(DEFAULT_INCLUDE),
                                         problems)
            excluded += left_out
        else:
            candidates = [path]
        for candidate in candidates:
            key = resolved(candidate)
            if key not in found:
                found[key] = Target(candidate, not walked)
            elif not walked:
                found[key] = found[key]._replace(explicit=True)
    return Discovery(list(found.values()), excluded, problems)


def forced_out(path: Path, root: Path, excludes: tuple[re.Pattern[str], ...]) -> bool:
    """Whether an explicitly named path (or the name `--stdin-filename` gives standard input)
    matches `excludes`, taken relative to `root` (or absolute when outside it), with a leading
    `/` and a trailing one for a directory."""
    real = resolved(path)
    try:
        shown = "/" + real.relative_to(resolved(root)).as_posix()
    except ValueError:
        shown = real.as_posix()
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


def walk(top: Path) -> Iterator[tuple[Path, list[str], list[str]]]:
    """`os.walk(top)` without recursion (Python 3.11's recurses, and a tree 1,000 directories
    deep raised RecursionError): each directory top-down, with its subdirectories (a caller
    may prune the list) and its other entries; symlinked directories are listed, not
    followed, and directories that cannot be listed are passed over."""
    pending = [top]
    while pending:
        here = pending.pop()
        try:
            with os.scandir(here) as scanned:
                entries = sorted(scanned, key=lambda entry: entry.name)
        except OSError:
            continue
        dirnames: list[str] = []
        filenames: list[str] = []
        links: set[str] = set()
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            (dirnames if is_dir else filenames).append(entry.name)
            if is_dir and entry.is_symlink():
                links.add(entry.name)
        yield here, dirnames, filenames
        pending.extend(here / d for d in reversed(dirnames) if d not in links)


def _walk(
    top: Path, excludes: tuple[re.Pattern[str], ...], include: re.Pattern[str],
    problems: list[Problem],
) -> tuple[list[Path], int]:
    """The files under `top` that `include` matches, and how many files and directories were
    left out; a `.gitignore` that cannot be read or holds lines git ignores, and a symlink
    leading outside `top`, add to `problems`."""
    files: list[Path] = []
    excluded = 0
    ignores: list[tuple[Path, pathspec.PathSpec]] = []
    for here, dirnames, filenames in walk(top):
        if ".gitignore" in filenames:
            spec = _gitignore(here / ".gitignore", problems)
            if spec is not None:
                ignores.append((here, spec))

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
        for path in included:
            if _leads_outside(path, top):
                problems.append(Problem(path, Finding(
                    SYMLINK_OUTSIDE, 1, 1, f"symlink to {resolved(path)}, outside {top}: "
                    "skipped")))
            else:
                files.append(path)
        excluded += len(kept) - len(dirnames) + len(matching) - len(included)
    return sorted(files), excluded


def _leads_outside(path: Path, top: Path) -> bool:
    """Whether `path` is a symbolic link whose target lies outside the walked `top` (a loop,
    which has no target, does not)."""
    if not path.is_symlink():
        return False
    target = resolved(path)
    return not (target.is_relative_to(resolved(top)) or target.is_relative_to(top.absolute()))


def _gitignore(path: Path, problems: list[Problem]) -> pathspec.PathSpec | None:
    """The patterns of the `.gitignore` at `path`, without the lines git ignores (each
    reported); None when it cannot be read (a dangling link, a FIFO: never opened), as git
    then applies none of it. pathspec is imported in `_spec`: a run on named files starts
    faster without it."""
    try:
        lines = read_source(path).decode(errors="replace").splitlines()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        problems.append(Problem(path, Finding(CANNOT_PROCESS, 1, 1, f"cannot read: "
                                              f"{reason.lower()}; its patterns are not applied")))
        return None
    try:
        return _spec(lines)
    except (ValueError, re.error):  # one bad line fails them all: find it
        pass
    kept = []
    for number, line in enumerate(lines, start=1):
        try:
            _spec([line])
        except (ValueError, re.error):
            problems.append(Problem(path, Finding(
                GITIGNORE_LINE_IGNORED, number, 1,
                f"`{line}` is not a valid pattern: ignored, as git ignores it")))
            continue
        kept.append(line)
    return _spec(kept)


def _spec(lines: list[str]) -> pathspec.PathSpec:
    """pathspec's patterns for `lines`. `re` warns about some of the regexes it builds (a
    FutureWarning for `[[a]`): those are the user's patterns, not amprewrite's to print."""
    import warnings

    import pathspec

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return pathspec.GitIgnoreSpec.from_lines(lines)


def _ignored(spec: pathspec.PathSpec, base: Path, path: Path, is_dir: bool) -> bool:
    try:
        relative = path.relative_to(base).as_posix()
    except ValueError:
        return False
    return spec.match_file(relative + "/" if is_dir else relative)
