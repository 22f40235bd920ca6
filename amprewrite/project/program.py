"""Which named files form one program with which project modules: the import graph over the
modules that may step, save or pass on an optimizer, and the groups of modules a training
step spans.

Besides the modules the named files import, the project's other files that may import a
named one are looked at (a text search, then an outline of those that match), so that a
named `engine.py` whose caller `main.py` was not named (pre-commit names only the staged
files) is not rewritten as if it stood alone.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from amprewrite.analysis.kinds import Kind
from amprewrite.discovery import skipped, walk
from amprewrite.engine import MAX_SOURCE_BYTES
from amprewrite.fileio import read_source, resolved
from amprewrite.project.layout import ModuleFinder, common_directory, project_root
from amprewrite.project.outline import Outline, Symbol, outline

# A module that mentions no optimizer, no `.step(`, `zero_grad` or `state_dict` can neither
# step, save nor pass one on; a package's `__init__.py` is looked at all the same (it may
# re-export the classes and functions that do).
_MAY_LINK = re.compile(rb"optim|\.step\(|zero_grad|state_dict")
_IMPORTERS_SEARCHED = 2000  # files at most walked past looking for importers of named ones


@dataclass
class Program:
    """The named files, the project modules they reach, and the candidate groups."""

    root: Path
    finder: ModuleFinder
    sources: dict[Path, bytes]  # every module read (resolved path -> bytes)
    shown: dict[Path, str]  # resolved path -> how the user sees it
    groups: list[list[Path]]  # modules linked by calls that may pass an optimizer
    outlines: dict[Path, Outline]  # of the modules read that may step or pass an optimizer

    def resolve(self, importer: Path, qualified: str) -> Symbol | None:
        """The project file and name a qualified name from `importer`'s imports stands for
        (`.engine.train` -> engine.py, `train`), through packages that re-export it, or None
        outside the project."""
        level = len(qualified) - len(qualified.lstrip("."))
        parts = qualified[level:].split(".")
        for split in range(len(parts) - 1, -1, -1):  # `pkg.training.f`: pkg/training.py, else
            target, symbol = ".".join(parts[:split]), ".".join(parts[split:])  # pkg's `training`
            if not symbol or not (target or level):
                continue
            file = self.finder.find(importer, target, level)
            if file is not None:
                return self.defining(file, symbol)
        return None

    def defining(self, file: Path, symbol: str) -> Symbol:
        """Where `symbol`, as `file` offers it, is defined: `from .trainer import Trainer` in
        a package's `__init__.py` leads to `trainer.py`, and `training.pass_epoch` after
        `from .utils import training` to `utils/training.py` (a few re-exports deep)."""
        return _defining(self.outlines, file, symbol)

    def kinds_for(self, importer: Path) -> Callable[[str], Kind | None]:
        """What the project functions `importer` calls return, by the qualified name it
        calls them by (an optimizer for a factory like `make_solver(cfg, model)`)."""

        def kind(qualified: str) -> Kind | None:
            target = self.resolve(importer, qualified)
            if target is None or target[0] not in self.outlines:
                return None
            return Kind.OPTIMIZER if target[1] in self.outlines[target[0]].factories else None

        return kind


_REEXPORTS_FOLLOWED = 4


def _defining(outlines: dict[Path, Outline], file: Path, symbol: str) -> Symbol:
    for _ in range(_REEXPORTS_FOLLOWED):
        offered = outlines.get(file)
        if offered is None or symbol in offered.defines:
            break
        head, dotted, rest = symbol.partition(".")
        if dotted and head in offered.module_names:  # an attribute of a module it imports
            file, symbol = offered.module_names[head], rest
            continue
        if head in offered.exports:
            file, name = offered.exports[head]
            symbol = f"{name}.{rest}" if dotted else name
            continue
        starred = [f for f in offered.star_exports if f in outlines
                   and symbol in outlines[f].defines | set(outlines[f].exports)]
        if not starred:
            break
        file = starred[-1]  # the last `import *` that binds it wins, as in Python
    return file, symbol


def load_program(named: dict[Path, str], jobs: int | None = None) -> Program:
    """The program of the named Python files (resolved path -> path as given); many named
    files are outlined by `jobs` processes (default: all cores)."""
    root = project_root(list(named))
    finder = ModuleFinder(root, common_directory(list(named)))
    sources: dict[Path, bytes] = {}
    for path in named:
        try:
            sources[path] = read_source(path, MAX_SOURCE_BYTES)
        except OSError:
            continue  # a named file's own read error (or size) is reported by its own run
    candidates = [path for path, source in sources.items() if _looked_at(path, source)]
    outlines = _outline_many(candidates, sources, finder, jobs)
    pending = [path for found in outlines.values() for path in found.imported]
    while pending:  # the project modules the named files import, and theirs
        path = pending.pop()
        if path in sources:
            continue
        try:
            sources[path] = source = read_source(path, MAX_SOURCE_BYTES)
        except OSError:
            continue
        found = outline(path, source, finder) if _looked_at(path, source) else None
        if found is not None:
            outlines[path] = found
            pending.extend(p for p in found.imported if p not in sources)
    offering = {path for path in named if path in outlines and outlines[path].receivers}
    for path, source in _possible_importers(root, offering, sources) if offering else ():
        found = outline(path, source, finder)
        if found is not None and found.imported & set(named):
            sources[path] = source
            outlines[path] = found
    shown = {path: named.get(path) or shown_path(path) for path in sources}
    return Program(root, finder, sources, shown, _groups(outlines, set(named)), outlines)


def _looked_at(path: Path, source: bytes) -> bool:
    return path.name == "__init__.py" or bool(_MAY_LINK.search(source))


_PARALLEL_FROM = 64  # modules to outline before a process pool pays for its start


def _outline_many(
    paths: list[Path], sources: dict[Path, bytes], finder: ModuleFinder, jobs: int | None
) -> dict[Path, Outline]:
    """The outlines of `paths` (those that parse), in processes when there are many."""
    workers = min(jobs or os.cpu_count() or 1, len(paths))
    if workers <= 1 or len(paths) < _PARALLEL_FROM:
        found = {path: outline(path, sources[path], finder) for path in paths}
    else:
        from concurrent.futures import ProcessPoolExecutor  # only a run naming many files

        with ProcessPoolExecutor(max_workers=workers) as pool:
            done = pool.map(_outline_file, [(finder.root, finder.scope, path) for path in paths],
                            chunksize=max(1, len(paths) // (workers * 8)))
            found = dict(zip(paths, done, strict=True))
    return {path: result for path, result in found.items() if result is not None}


def _outline_file(job: tuple[Path, Path, Path]) -> Outline | None:
    """A worker's outline of one file (read again there: cheaper than sending its bytes)."""
    root, scope, path = job
    try:
        return outline(path, read_source(path, MAX_SOURCE_BYTES), _finder(root, scope))
    except OSError:
        return None


@functools.cache
def _finder(root: Path, scope: Path) -> ModuleFinder:
    return ModuleFinder(root, scope)


def _possible_importers(
    root: Path, named: set[Path], read: dict[Path, bytes]
) -> Iterator[tuple[Path, bytes]]:
    """Project files not read yet that may step, save or pass an optimizer and name one
    of the `named` modules (those with functions or classes that may receive an optimizer:
    no other can need a caller's scaler)."""
    names = {p.parent.name if p.name == "__init__.py" else p.stem for p in named}
    imports = _importing(names)
    for path in _python_files(root):
        if path in read:
            continue
        try:
            source = read_source(path, MAX_SOURCE_BYTES)
        except OSError:
            continue
        if _MAY_LINK.search(source) and imports.search(source):
            yield path, source


def _importing(names: set[str]) -> re.Pattern[bytes]:
    """Import statements that may name one of the modules `names`: `import engine`,
    `from .engine import f`, `from pkg import (utils,\n engine)` (a cheap text search: an
    outline decides)."""
    name = rb"\b(?:%s)\b" % b"|".join(re.escape(n.encode()) for n in sorted(names))
    return re.compile(rb"^[ \t]*(?:from[ \t]+[\w.]*%s|import[ \t][^\n]*%s"
                      rb"|from[ \t]+[\w.]+[ \t]+import[ \t]*(?:\([^)]*|[^\n]*)%s)"
                      % (name, name, name), re.MULTILINE)


def _python_files(root: Path) -> Iterator[Path]:
    """The project's Python files, as a directory walk finds them (at most a few thousand:
    beyond that, importers are not searched)."""
    count = 0
    for here, dirnames, filenames in walk(root):
        dirnames[:] = sorted(d for d in dirnames if not skipped(here / d))
        count += len(filenames) + len(dirnames)
        if count > _IMPORTERS_SEARCHED:
            return
        for name in filenames:
            if name.endswith(".py"):
                yield resolved(here / name)


def shown_path(path: Path) -> str:
    """A module that was not named, as a path relative to the current directory."""
    relative = os.path.relpath(path)
    return path.as_posix() if relative.startswith("..") else Path(relative).as_posix()


def _groups(outlines: dict[Path, Outline], named: set[Path]) -> list[list[Path]]:
    """Connected modules (a call of a function or class that may take an optimizer links
    caller and callee) that hold a named file, each in a stable order."""
    parent: dict[Path, Path] = {}

    def find(path: Path) -> Path:
        while parent.get(path, path) != path:
            path = parent[path]
        return path

    for caller in outlines.values():
        for called in caller.calls:
            file, symbol = _defining(outlines, *called)
            callee = outlines.get(file)
            if callee is not None and symbol in callee.receivers and file != caller.path:
                parent[find(caller.path)] = find(file)
    members: dict[Path, list[Path]] = {}
    for path in {*parent, *parent.values()}:
        members.setdefault(find(path), []).append(path)
    return [sorted(group) for group in members.values()
            if len(group) > 1 and named.intersection(group)]
