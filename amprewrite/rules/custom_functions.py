"""Decorate custom autograd Functions so their backward runs in the forward's precision."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis.custom_functions import CustomFunction
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, declare
from amprewrite.rules.context import RuleContext
from amprewrite.rules.registry import Example, rule
from amprewrite.rules.shared_examples import MIXED_PRECISION_ALREADY
from amprewrite.transform import Replace

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis


FUNCTION_DECORATED = declare(
    "AMP150", CHANGE, "custom autograd Function decorated for autocast",
    "`custom_fwd`/`custom_bwd` make backward run with the forward's autocast state (float32 "
    "inputs where the forward needs them).",
    why="A custom `torch.autograd.Function` is used in code that runs under autocast.",
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


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    decorators = ctx.style.decorators if ctx.style is not None else None
    if decorators is not None and analysis.custom_functions:
        decorate_custom_functions(ctx, analysis.custom_functions, decorators)


_CUSTOM_FUNCTIONS_EXAMPLES = (
    Example(
        before="""\
import torch


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad
""",
        after="""\
import torch
from amprewrite_runtime import custom_bwd, custom_fwd


class Square(torch.autograd.Function):
    @staticmethod
    @custom_fwd
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    @custom_bwd
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad
""",
        codes=(FUNCTION_DECORATED,),
    ),
    Example(
        before=MIXED_PRECISION_ALREADY,
        after=None,
        codes=(),
    ),
)


RULE = rule("custom-functions", (FUNCTION_DECORATED,), _plan,
            examples=_CUSTOM_FUNCTIONS_EXAMPLES)
