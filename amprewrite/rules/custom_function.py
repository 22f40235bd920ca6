"""Decorate custom autograd Functions so their backward runs in the forward's precision."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amprewrite.analysis.custom_functions import CustomFunction
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, declare
from amprewrite.rules.context import RuleContext
from amprewrite.transform import Replace

FUNCTION_DECORATED = declare(
    "AMP150", CHANGE, "custom autograd Function decorated for autocast",
    "`custom_fwd`/`custom_bwd` make backward run with the forward's autocast state (float32 "
    "inputs where the forward needs them).",
)


@dataclass(frozen=True)
class Decorators:
    """The AMP decorators of custom autograd Functions, as source text."""

    forward: str  # e.g. `custom_fwd`
    forward_float32: str  # e.g. `custom_fwd(cast_inputs=torch.float32)`
    backward: str  # e.g. `custom_bwd`


def decorate_custom_functions(
    ctx: RuleContext, functions: list[CustomFunction], decorators: Decorators
) -> None:
    for function in functions:
        forward = decorators.forward_float32 if function.needs_float32 else decorators.forward
        _add_decorator(ctx, function.forward, forward)
        if function.backward is not None:
            _add_decorator(ctx, function.backward, decorators.backward)
        detail = " (inputs cast to float32)" if function.needs_float32 else ""
        ctx.notes.append(Note(FUNCTION_DECORATED, function.cls, f"custom autograd Function "
                              f"`{function.cls.name.value}` decorated for autocast{detail}"))


def _add_decorator(ctx: RuleContext, function: cst.FunctionDef, code: str) -> None:
    decorator = cst.Decorator(decorator=ctx.parse_expression(code))

    def build(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.FunctionDef)
        return node.with_changes(decorators=[*node.decorators, decorator])

    ctx.plan.replaces.append(Replace(function, build))
