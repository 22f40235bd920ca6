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
    """The first AMP API the module uses (`torch.autocast`, `torch.cuda.amp`, ...), or None."""
    for target in facts.imports.aliases.values():
        if _is_amp(target):
            return target
    for node in _attribute_chains(facts.module):
        resolved = facts.imports.resolve(node)
        if resolved is not None and _is_amp(resolved):
            return resolved
    return None


def _attribute_chains(module: cst.Module) -> list[cst.Attribute]:
    found: list[cst.Attribute] = []

    class Visitor(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> bool:
            found.append(node)
            return True

    module.visit(Visitor())
    return found
