"""The runtime's modules import torch and the standard library only, and no module imports
one that imports it back (`TYPE_CHECKING` imports included)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "runtime" / "amprewrite_runtime"
# numpy: seeded when installed, never required; torchao: float8 training (the `[float8]`
# extra), imported only where it converts a model; accelerate: its float8 recipe, imported only
# for a script that builds an Accelerator
THIRD_PARTY = {"torch", "numpy", "torchao", "accelerate"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Each module's imports: modules, and `from X import Y` as both X and X.Y."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        names = found[_module_name(path)] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_only_torch_and_the_standard_library() -> None:
    outside = {name.partition(".")[0] for names in _imports().values() for name in names}
    outside -= {"amprewrite_runtime", "__future__"}
    assert outside - THIRD_PARTY <= set(sys.stdlib_module_names)


def test_no_import_cycle() -> None:
    imports = _imports()
    packages = {_module_name(path) for path in PACKAGE.rglob("__init__.py")}
    # A module's own packages are imported before it anyway: not an edge.
    edges = {module: {name for name in names if name in imports
                      and not (name in packages and module.startswith(name + "."))}
             for module, names in imports.items()}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        assert module not in path, f"import cycle: {' -> '.join([*path, module])}"
        if module not in done:
            for name in sorted(edges[module]):
                visit(name, [*path, module])
            done.add(module)

    for module in sorted(edges):
        visit(module, [])
