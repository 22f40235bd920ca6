"""Imports and module-level names the rewritten code needs."""

from __future__ import annotations

from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.names import FreshNames

RUNTIME_MODULE = "amprewrite_runtime"


def runtime_import(
    facts: ModuleFacts, symbols: list[str], names: FreshNames
) -> tuple[str, dict[str, str]]:
    """`from amprewrite_runtime import ...` and the local name of each symbol.

    A symbol whose name the module already uses as a name of its own (not only after a dot,
    as in `torch.autocast`) is imported under a fresh alias.
    """
    local: dict[str, str] = {}
    parts = []
    for symbol in symbols:
        if symbol in facts.bare_names:
            alias = names.fresh((f"amp_{symbol.lower()}",))
            local[symbol] = alias
            parts.append(f"{symbol} as {alias}")
        else:
            local[symbol] = symbol
            parts.append(symbol)
    return f"from {RUNTIME_MODULE} import {', '.join(parts)}", local


def torch_name(facts: ModuleFacts) -> str | None:
    """The local name bound to the `torch` module, if the script imports it."""
    for local, target in facts.imports.aliases.items():
        if target == "torch":
            return local
    return None
