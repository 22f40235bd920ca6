"""No import cycle in `amprewrite/`: the graph of every `import` and `from ... import` in
every module, those inside functions (deferred imports) included, is acyclic. Imports under
`if TYPE_CHECKING:` are left out: they never run, and annotations may name each other."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "amprewrite"


def module_name(path: Path, root: Path) -> str:
    """`amprewrite/rules/autocast.py` -> `amprewrite.rules.autocast` (a package's
    `__init__.py` is the package)."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(tree: ast.Module, module: str, is_package: bool) -> set[str]:
    """Every module name an import statement anywhere in `tree` names, relative imports
    resolved; `from pkg import name` names both `pkg` and `pkg.name` (a submodule or not)."""
    package = module if is_package else module.rpartition(".")[0]
    names: set[str] = set()
    for node in run_time_nodes(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def run_time_nodes(tree: ast.Module) -> list[ast.AST]:
    """Every node of `tree` outside the bodies of `if TYPE_CHECKING:`."""
    nodes: list[ast.AST] = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        nodes.append(node)
        if isinstance(node, ast.If) and ast.unparse(node.test) in _TYPE_CHECKING:
            pending.extend(node.orelse)
            continue
        pending.extend(ast.iter_child_nodes(node))
    return nodes


_TYPE_CHECKING = {"TYPE_CHECKING", "typing.TYPE_CHECKING"}


def import_graph(root: Path = PACKAGE_ROOT) -> dict[str, set[str]]:
    """Each module of the package and the package's modules it imports."""
    paths = {module_name(path, root): path for path in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        names = imported_names(tree, module, path.name == "__init__.py")
        graph[module] = {name for name in names if name in paths and name != module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as its path (first module repeated at the end), or None."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path: list[str] = []
        on_path: set[str] = set()
        stack = [(start, iter(sorted(graph[start])))]
        path.append(start)
        on_path.add(start)
        while stack:
            node, successors = stack[-1]
            following = next(successors, None)
            if following is None:
                stack.pop()
                path.pop()
                on_path.discard(node)
                done.add(node)
            elif following in on_path:
                return [*path[path.index(following):], following]
            elif following not in done:
                stack.append((following, iter(sorted(graph[following]))))
                path.append(following)
                on_path.add(following)
    return None


def test_the_package_has_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_a_deferred_import_closing_a_cycle_is_found(tmp_path: Path) -> None:
    package = tmp_path / "amprewrite"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text("def f():\n    from .. import c\n")
    (package / "c.py").write_text("def g():\n    import amprewrite.a\n")
    (package / "d.py").write_text("from typing import TYPE_CHECKING\n"
                                  "if TYPE_CHECKING:\n    from amprewrite import a\n")
    (package / "a.py").write_text("from amprewrite.sub import b\nfrom . import d\n")
    assert find_cycle(import_graph(package)) == [
        "amprewrite.a", "amprewrite.sub.b", "amprewrite.c", "amprewrite.a"]


def test_the_catalog_is_a_leaf() -> None:
    """Every module that emits a code imports the catalog, so it imports none of them."""
    assert import_graph()["amprewrite.catalog"] == set()
