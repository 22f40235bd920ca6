"""Names a program reads that nothing binds (CPython's own symbol tables): a rewrite must add
none (an import it forgot, a scaler it did not create where it is used)."""

from __future__ import annotations

import _symtable  # type: ignore[import-not-found]  # `symtable`'s raw tables: no stubs
import builtins
import re
from typing import Any

_BOUND = _symtable.DEF_LOCAL | _symtable.DEF_IMPORT

_BUILTINS = frozenset(dir(builtins)) | {"__file__", "__name__", "__doc__", "__spec__",
                                        "__loader__", "__package__", "__builtins__",
                                        "__path__", "__annotations__", "__dict__"}
_STAR_IMPORT = re.compile(r"^\s*from\s+\S+\s+import\s+\*", re.MULTILINE)
_IPYTHON = ("get_ipython", "display")  # a notebook's cells read what IPython provides


def unbound_names(source: str) -> set[tuple[str, str]]:
    """(scope, name) for each name read in a scope where nothing in the module binds it; the
    scope is the path of function and class names (`train`, `Trainer/step`). Empty where a
    star import may bind anything."""
    if _STAR_IMPORT.search(source):
        return set()
    try:
        # the raw tables (what `symtable.symtable` wraps): their flags are read directly,
        # without a `Symbol` object per name of every scope
        top = _symtable.symtable(source, "<amprewrite>", "exec")
    except SyntaxError:
        return set()
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
    return {(path, name) for path, name in reads if name not in known}
