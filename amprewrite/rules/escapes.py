"""Cast low-precision values back to float32 where they leave autocast for a float32 use."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis.escapes import Escapes
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, SKIP, declare
from amprewrite.rules.context import RuleContext
from amprewrite.rules.edits import as_float, as_receiver
from amprewrite.rules.registry import Example, rule
from amprewrite.transform import Replace

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis


CAST_AFTER_AUTOCAST = declare(
    "AMP112", CHANGE, "low-precision value cast back to float32 after autocast",
    "A tensor computed under autocast reaches code that needs float32 (`.numpy()`, numpy, a "
    "float32 model or matmul, a loss, an index assignment): `.float()` is added at that use.",
    why=(
        "A tensor computed under autocast is used after the region where float32 is "
        "needed (`.numpy()`, numpy, a float32 model or matmul, a loss, an index assignment)."
    ),
)

SATURATING_INPUT_CAST = declare(
    "AMP136", CHANGE, "input of a saturating op cast to float32",
    "`tanh` or `sigmoid` of a value computed under autocast is subtracted from 1 (a squashed "
    "action's log-probability `log(1 - tanh(z)^2 + eps)`, a hand-written binary cross-entropy "
    "`log(1 - sigmoid(x))`): in bfloat16/float16 the op rounds to 1.0 once its input passes "
    "about 3 and the difference becomes 0. Its input becomes `.float()`, so the op and the "
    "difference run in float32.",
    why=(
        "A tanh or sigmoid of a low-precision value is subtracted from 1, which cancels "
        "to 0 once the op rounds to 1.0."
    ),
    example=(
        "action = torch.tanh(z)   # z from a Linear under autocast\n"
        "log_prob = log_prob - torch.log(1 - action.pow(2) + 1e-6)\n"
        "# becomes: action = torch.tanh(z.float())"
    ),
)

ESCAPE_NOT_CASTABLE = declare(
    "AMP133", SKIP, "low-precision values cannot be cast where they are used",
    "A container or starred argument carries autocast outputs to a float32 use: autocast is left "
    "out of the file. Cast with `.float()` where the tensors are produced and run again.",
    why=(
        "Values computed under autocast reach a float32 use through a container or a "
        "starred argument, where no `.float()` can be added."
    ),
    example=(
        "outputs = [model(x) for x in batch]\n"
        "loss = float32_loss(*outputs)"
    ),
)


def cast_escapes(ctx: RuleContext, escapes: Escapes) -> None:
    """Cast each escaping value at its use; when one cannot be cast at one place, the
    autocast regions are left out (the caller skips them) and the use is reported."""
    code_for = ctx.facts.module.code_for_node
    for stuck in escapes.stuck:
        ctx.notes.append(Note(ESCAPE_NOT_CASTABLE, stuck.node,
                              f"`{_short(code_for(stuck.node))}` would "
                              f"hold low-precision tensors from autocast and reach {stuck.what}; "
                              "autocast left out of this file (cast them with `.float()` where "
                              "they are produced, then run again)"))
    if escapes.stuck:
        return
    for escape in escapes.saturating:
        ctx.plan.replaces.append(Replace(escape.node, as_float))
        ctx.notes.append(Note(SATURATING_INPUT_CAST, escape.node,
                              f"`{_short(code_for(escape.node))}` cast to float32 for "
                              f"{escape.use}"))
    for escape in escapes.casts:
        text = _short(code_for(escape.node))
        if escape.like is not None:
            like = code_for(escape.like)
            ctx.plan.replaces.append(Replace(escape.node, _dtype_of(ctx, like)))
            ctx.notes.append(Note(CAST_AFTER_AUTOCAST, escape.node,
                                  f"`{text}` cast to `{like}`'s dtype for {escape.use} (one "
                                  "of them may be low precision under autocast)"))
            continue
        if escape.floating:
            ctx.plan.replaces.append(Replace(escape.node, as_float))
            message = f"`{text}` is low precision after autocast: cast to float32"
        else:
            ctx.plan.replaces.append(Replace(escape.node, _floating_only(ctx)))
            message = (f"`{text}` may be low precision after autocast (or an integer sample, "
                       "left as it is): cast to float32 if floating")
        ctx.notes.append(Note(CAST_AFTER_AUTOCAST, escape.node, f"{message} for {escape.use}"))


def _dtype_of(ctx: RuleContext, like: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """`values` -> `values.to(target.dtype)`: the dtype of the tensor an in-place op changes."""

    def build(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.BaseExpression)
        code = ctx.facts.module.code_for_node(as_receiver(node))
        return ctx.parse_expression(f"{code}.to({like}.dtype)")

    return build


def _floating_only(ctx: RuleContext) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """A cast that leaves integer tensors alone (a categorical sample stays int64):
    `to_float32(x)` from the runtime, else `(x.float() if x.is_floating_point() else x)`."""
    helper = ctx.style.float32_cast if ctx.style is not None else ""

    def build(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.BaseExpression)
        if helper:
            return cst.Call(func=cst.Name(helper), args=[cst.Arg(node)])
        code = ctx.facts.module.code_for_node(as_receiver(node))
        return ctx.parse_expression(f"({code}.float() if {code}.is_floating_point() else {code})")

    return build


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    cast_escapes(ctx, analysis.escapes)


_ESCAPES_EXAMPLES = (
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    out = model(x)
    loss = torch.nn.functional.mse_loss(out, y)
    loss.backward()
    optimizer.step()
    print(out.detach().numpy().mean())
""",
        after="""\
import torch
from amprewrite_runtime import GradScaler, autocast

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = GradScaler()
for x, y in loader:
    optimizer.zero_grad()
    with autocast():
        out = model(x)
        loss = torch.nn.functional.mse_loss(out, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    print(out.detach().float().numpy().mean())
""",
        codes=(CAST_AFTER_AUTOCAST,),
    ),
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler()
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda"):
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    print(loss.item())
""",
        after=None,
        codes=(),
    ),
)


RULE = rule("escapes", (CAST_AFTER_AUTOCAST, SATURATING_INPUT_CAST, ESCAPE_NOT_CASTABLE), _plan,
            examples=_ESCAPES_EXAMPLES)
