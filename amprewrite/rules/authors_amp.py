"""The author's own mixed precision at O0: where it runs in a test, and the imports that go
with it (the rest of the revert is `revert_to_fp32`'s)."""

from __future__ import annotations

import ast

import libcst as cst

from amprewrite.analysis.amp_usage import AmpUsage, bound_names
from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.names import dotted
from amprewrite.rules.context import RuleContext
from amprewrite.rules.edits import importing_only, remove
from amprewrite.transform import Replace


def test_running_amp(facts: ModuleFacts, usage: AmpUsage) -> cst.FunctionDef | None:
    """The test (`test_*`, a method of a `Test*` class or a TestCase) that holds an autocast
    or a scaler the revert would take out."""
    nodes: list[cst.CSTNode] = [*usage.unwrap, *usage.calls, *usage.statements,
                                *(line for line, _ in usage.parts)]
    for node in nodes:
        around = facts.statements_around(node)
        function = facts.statements[around[0]].function if around else None
        if function is not None and _is_test(function, facts):
            return function
    return None


def _is_test(function: cst.FunctionDef, facts: ModuleFacts) -> bool:
    cls = facts.function_class.get(function)
    if cls is None:
        return function.name.value.startswith("test")
    return cls.name.value.startswith("Test") or any(
        (dotted(base.value) or "").rsplit(".", 1)[-1] == "TestCase" for base in cls.bases)


# Modules whose names only mixed precision uses: their imports go with it once unused.
_AMP_MODULES = ("torch.amp", "torch.cuda.amp", "torch.cpu.amp",
                "torch.distributed.fsdp.sharded_grad_scaler")


def drop_unused_amp_imports(ctx: RuleContext, reverted: ast.Module) -> None:
    """The author's imports of autocast and the scaler that nothing uses after the revert
    (`from torch.cuda.amp import GradScaler, autocast`) go too."""
    used = {node.id for node in ast.walk(reverted) if isinstance(node, ast.Name)}
    edited = {id(replace.node) for replace in ctx.plan.replaces}
    for statement in ctx.facts.statements:
        if not isinstance(statement, cst.SimpleStatementLine) or id(statement) in edited or not (
                all(_imports_amp(small) for small in statement.body)):
            continue
        kept = {name for name in bound_names(statement) if name in used}
        if not kept:
            ctx.plan.replaces.append(Replace(statement, remove))
        elif kept != bound_names(statement):
            ctx.plan.replaces.append(Replace(statement, importing_only(frozenset(kept))))


def _imports_amp(small: cst.BaseSmallStatement) -> bool:
    """`from torch.cuda.amp import ...` or `import torch.cuda.amp as amp`."""
    if isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative:
        return (dotted(small.module) or "") in _AMP_MODULES and not isinstance(
            small.names, cst.ImportStar)
    return isinstance(small, cst.Import) and all(
        alias.asname is not None and (dotted(alias.name) or "") in _AMP_MODULES
        for alias in small.names)
