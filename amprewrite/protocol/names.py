"""Names a program reads that nothing binds (CPython's own symbol tables): a rewrite must add
none (an import it forgot, a scaler it did not create where it is used)."""

from __future__ import annotations

import builtins
import re
import symtable

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
        top = symtable.symtable(source, "<amprewrite>", "exec")
    except SyntaxError:
        return set()
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    reads: list[tuple[str, str]] = []
    todo: list[tuple[symtable.SymbolTable, str]] = [(top, "")]
    while todo:
        table, path = todo.pop()
        for symbol in table.get_symbols():
            name = symbol.get_name()
            if symbol.is_declared_global() and symbol.is_assigned():
                bound.add(name)
            elif symbol.is_referenced() and symbol.is_global() and not symbol.is_declared_global():
                reads.append((path, name))
        for child in table.get_children():
            todo.append((child, f"{path}/{child.get_name()}" if path else child.get_name()))
    known = bound | _BUILTINS | set(_IPYTHON)
    return {(path, name) for path, name in reads if name not in known}
