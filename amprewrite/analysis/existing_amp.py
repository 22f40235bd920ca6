"""Detect mixed precision that a module already uses (so the rewrite leaves it alone)."""

from __future__ import annotations

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts

_AMP_MODULES = (
    "torch.amp",
    "torch.cuda.amp",
    "torch.cpu.amp",
    "apex.amp",
    "apex.fp16_utils",
    "amprewrite_runtime",
)
_AMP_NAMES = frozenset({"torch.autocast", "torch.GradScaler", "apex.amp"})


def _is_amp(qualified: str) -> bool:
    return qualified in _AMP_NAMES or any(
        qualified == module or qualified.startswith(module + ".") for module in _AMP_MODULES
    )


def existing_amp(facts: ModuleFacts) -> str | None:
    """The first AMP API the module uses (`torch.autocast`, `torch.cuda.amp`, ...), or None:
    an import of one, a call of one, or a decorator naming one (from the collected facts, so
    no further pass over the tree)."""
    for target in facts.imports.aliases.values():
        if _is_amp(target):
            return target
    expressions: list[cst.BaseExpression] = [site.call.func for site in facts.calls]
    expressions.extend(d.decorator for f in facts.functions for d in f.decorators)
    for expression in expressions:
        resolved = facts.imports.resolve(expression)
        if resolved is not None and _is_amp(resolved):
            return resolved
    return None
