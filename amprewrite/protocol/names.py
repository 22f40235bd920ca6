"""Names a program reads that nothing binds (CPython's own symbol tables): a rewrite must add
none (an import it forgot, a scaler it did not create where it is used)."""

from __future__ import annotations

import _symtable  # type: ignore[import-not-found]  # `symtable`'s raw tables: no stubs
import ast
import builtins
import re
from typing import Any

from amprewrite.protocol.unchanged import Rendered, TopLevel

_BOUND = _symtable.DEF_LOCAL | _symtable.DEF_IMPORT

_BUILTINS = frozenset(dir(builtins)) | {"__file__", "__name__", "__doc__", "__spec__",
                                        "__loader__", "__package__", "__builtins__",
                                        "__path__", "__annotations__", "__dict__"}
_STAR_IMPORT = re.compile(r"^\s*from\s+\S+\s+import\s+\*", re.MULTILINE)
_STAR_HINT = re.compile(r"import\s+\*")  # a literal start: the fast search before the other
_GLOBAL = re.compile(r"\bglobal\b")  # a function binding a module name
_IPYTHON = ("get_ipython", "display")  # a notebook's cells read what IPython provides


def unbound_names(source: str) -> set[tuple[str, str]]:
    """(scope, name) for each name read in a scope where nothing in the module binds it; the
    scope is the path of function and class names (`train`, `Trainer/step`). Empty where a
    star import may bind anything."""
    if _star_import(source):
        return set()
    found = _unbound(source)
    return set() if found is None else found[0]


def new_unbound_names(
    before: TopLevel, after: Rendered, after_text: str, after_tree: ast.Module
) -> set[tuple[str, str]] | None:
    """The names the output (`after_text`, parsed as `after_tree`, its top-level statements
    `after`) reads unbound that the input (its top-level statements `before`) does not, from
    the symbol tables of the top-level statements that differ only (most of a rewritten file
    is unchanged: a tenth of its lines); None where that cannot tell (ask `unbound_names` of
    both)."""
    if _star_import(after_text) or _binds_globals(after_text) or _binds_globals(before.text):
        return None
    kept, was = set(after.normalised), set(before.normalised)
    changed_new = [t for t, n in zip(after.texts, after.normalised, strict=True) if n not in was]
    changed_old = [t for t, n in zip(before.texts, before.normalised, strict=True)
                   if n not in kept]
    if not changed_new and not changed_old:
        return set()
    read_new = _unbound("\n".join(changed_new))
    read_old = _unbound("\n".join(changed_old))
    if read_new is None or read_old is None:
        return None
    module_level = _module_bindings(after_tree.body)
    if module_level is None:
        return None
    if any(name not in module_level for _, name in read_new[0] - read_old[0]):
        return None  # read unbound in what changed and bound nowhere plainly: ask the whole
    removed = read_old[1] - read_new[1] - module_level
    if any(re.search(rf"(?<![\w.]){re.escape(name)}\b", after_text) for name in removed):
        return None  # a binding the rewrite took out, its name still read somewhere
    return set()


def _star_import(text: str) -> bool:
    return _STAR_HINT.search(text) is not None and _STAR_IMPORT.search(text) is not None


def _binds_globals(text: str) -> bool:
    """Whether a `global` statement or an assignment expression (`:=`) may bind a module
    name where `_module_bindings` does not look."""
    return ":=" in text or ("global" in text and _GLOBAL.search(text) is not None)


def _unbound(source: str) -> tuple[set[tuple[str, str]], set[str]] | None:
    """The unbound reads of `source` and the names its module level binds; None where it does
    not compile."""
    try:
        # the raw tables (what `symtable.symtable` wraps): their flags are read directly,
        # without a `Symbol` object per name of every scope
        top = _symtable.symtable(source, "<amprewrite>", "exec")
    except SyntaxError:
        return None
    bound = {name for name, flags in top.symbols.items() if flags & _BOUND}
    reads: list[tuple[str, str]] = []
    todo: list[tuple[Any, str]] = [(top, "")]
    while todo:
        table, path = todo.pop()
        for name, flags in table.symbols.items():
            scope = (flags >> _symtable.SCOPE_OFF) & _symtable.SCOPE_MASK
            if scope == _symtable.GLOBAL_EXPLICIT:
                if flags & _symtable.DEF_LOCAL:
                    bound.add(name)
            elif scope == _symtable.GLOBAL_IMPLICIT and flags & _symtable.USE:
                reads.append((path, name))
        for child in table.children:
            todo.append((child, f"{path}/{child.name}" if path else child.name))
    known = bound | _BUILTINS | set(_IPYTHON)
    return {(path, name) for path, name in reads if name not in known}, bound


def _module_bindings(body: list[ast.stmt]) -> set[str] | None:
    """The names the module level binds in plain forms (definitions, imports, assignment,
    loop, `with` and `except` targets), looking into compound statements but not functions
    or classes; None where an assignment expression (`:=`) may bind more."""
    names: set[str] = set()
    todo = list(body)
    while todo:
        statement = todo.pop()
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(statement.name)
            continue
        if isinstance(statement, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in statement.names)
            continue
        targets: list[ast.expr] = []
        if isinstance(statement, ast.Assign):
            targets = statement.targets
        elif isinstance(statement, ast.AnnAssign | ast.AugAssign | ast.For | ast.AsyncFor):
            targets = [statement.target]
        elif isinstance(statement, ast.With | ast.AsyncWith):
            targets = [item.optional_vars for item in statement.items if item.optional_vars]
        elif isinstance(statement, ast.Try):
            names.update(handler.name for handler in statement.handlers if handler.name)
        for target in targets:
            names.update(node.id for node in ast.walk(target) if isinstance(node, ast.Name))
        for field in ("body", "orelse", "finalbody"):
            todo.extend(getattr(statement, field, ()))
        for handler in getattr(statement, "handlers", ()):
            todo.extend(handler.body)
        if getattr(statement, "cases", None):
            return None  # `match` captures bind names too
    return names
