"""Where a project starts and which file an import names, found on disk, never by importing.

The project root is the nearest directory above the named files holding `pyproject.toml`,
`setup.py`, `setup.cfg` or `.git`, else their common directory. A module `a.b` resolves to
`a/b.py` or `a/b/__init__.py` under the importing file's own directory (a script's
`sys.path[0]`), the named files' common directory (where the scripts that import a package's
modules run from), the root, or the root's `src/`: the first that exists, inside the root.
"""

from __future__ import annotations

import os
from pathlib import Path

_ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


def common_directory(paths: list[Path]) -> Path:
    """The deepest directory holding every one of the (resolved, existing) `paths`."""
    common = Path(os.path.commonpath([str(p) for p in paths]))
    return common if common.is_dir() else common.parent


def project_root(paths: list[Path]) -> Path:
    """The root of the project the (resolved, existing) `paths` belong to."""
    start = common_directory(paths)
    for candidate in (start, *start.parents):
        if any((candidate / marker).exists() for marker in _ROOT_MARKERS):
            return candidate
    return start


class ModuleFinder:
    """Resolves imported module names to files of one project (memoised: a repository's
    files import the same few modules)."""

    def __init__(self, root: Path, scope: Path | None = None) -> None:
        self.root = root
        self.scope = scope or root  # the named files' common directory
        self._found: dict[tuple[Path, str], Path | None] = {}

    def bases(self, importer: Path) -> tuple[Path, ...]:
        """Where an absolute import from `importer` is looked for, in order (the named
        files' directory only for the files under it)."""
        if importer.is_relative_to(self.scope):
            return (importer.parent, self.scope, self.root, self.root / "src")
        return (importer.parent, self.root, self.root / "src")

    def find(self, importer: Path, module: str, level: int = 0) -> Path | None:
        """The file `module` names when imported from `importer` (`level` leading dots for a
        relative import), or None when it is not a file of this project."""
        if level:
            base = importer.parent
            for _ in range(level - 1):
                base = base.parent
            return self._in_project(base, module) if module else self._package(base)
        for base in self.bases(importer):
            found = self._in_project(base, module)
            if found is not None:
                return found
        return None

    def _in_project(self, base: Path, module: str) -> Path | None:
        key = (base, module)
        if key not in self._found:
            self._found[key] = self._locate(base, module)
        return self._found[key]

    def _locate(self, base: Path, module: str) -> Path | None:
        stem = base.joinpath(*module.split("."))
        for candidate in (stem.with_name(stem.name + ".py"), stem / "__init__.py"):
            if candidate.is_file() and candidate.resolve().is_relative_to(self.root):
                return candidate.resolve()
        return None

    def _package(self, directory: Path) -> Path | None:
        init = directory / "__init__.py"
        inside = init.is_file() and init.resolve().is_relative_to(self.root)
        return init.resolve() if inside else None
