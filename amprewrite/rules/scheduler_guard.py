"""Step an LR scheduler only when the optimizer step it follows was not skipped."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis.schedulers import GuardedScheduler
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, declare
from amprewrite.rules.context import RuleContext
from amprewrite.rules.registry import Example, rule
from amprewrite.transform import Replace

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis


SCHEDULER_GUARDED = declare(
    "AMP111", CHANGE, "LR scheduler guarded against skipped steps",
    "A scheduler stepped in the same iteration as the optimizer only steps when the scaler did "
    "not skip the optimizer step (pytorch issue 55585).",
    why="An LR scheduler is stepped in the same iteration as an optimizer the scaler may skip.",
)


def decide_scale_variables(ctx: RuleContext, schedulers: list[GuardedScheduler]) -> None:
    """Plain style: name the variable holding the scale before the `update()` that follows
    each guarded scheduler's step (torch's GradScaler lowers its scale exactly when it
    skipped the step); `add_updates` assigns it, the guard compares it."""
    for scheduler in schedulers:
        if scheduler.after_update and id(scheduler.after.call) not in ctx.scale_before_update:
            name = ctx.names.fresh(("scale_before_update",))
            ctx.scale_before_update[id(scheduler.after.call)] = name


def guard_schedulers(ctx: RuleContext, schedulers: list[GuardedScheduler]) -> None:
    for scheduler in schedulers:
        if ctx.options.plain and not scheduler.after_update:
            continue  # the scale tells a skipped step only once `update()` has run
        if ctx.options.plain:
            name = ctx.scale_before_update[id(scheduler.after.call)]
            test = f"{ctx.scaler_expr}.get_scale() >= {name}"
        else:
            test = f"not {ctx.scaler_expr}.last_step_skipped"
        line = scheduler.site.statement
        condition = ctx.parse_expression(test)

        def build(node: cst.CSTNode, condition: cst.BaseExpression = condition) -> cst.CSTNode:
            assert isinstance(node, cst.SimpleStatementLine)
            body = cst.IndentedBlock(body=[node.with_changes(leading_lines=())])
            return cst.If(test=condition, body=body, leading_lines=node.leading_lines)

        ctx.plan.replaces.append(Replace(line, build))
        ctx.notes.append(Note(SCHEDULER_GUARDED, scheduler.site.call,
                              f"LR scheduler stepped only when "
                              f"the optimizer step was not skipped (`if {test}:`)"))


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    if ctx.scaler_expr is not None:
        guard_schedulers(ctx, analysis.schedulers)


_SCHEDULER_GUARD_EXAMPLES = (
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    scheduler.step()
""",
        after="""\
import torch
from amprewrite_runtime import GradScaler, autocast

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = GradScaler()
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)
for x, y in loader:
    optimizer.zero_grad()
    with autocast():
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    if not scaler.last_step_skipped:
        scheduler.step()
""",
        codes=(SCHEDULER_GUARDED,),
    ),
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler()
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 10)
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda"):
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scale = scaler.get_scale()
    scaler.update()
    if scale <= scaler.get_scale():
        scheduler.step()
""",
        after=None,
        codes=(),
    ),
)


RULE = rule("scheduler-guard", (SCHEDULER_GUARDED,), _plan,
            examples=_SCHEDULER_GUARD_EXAMPLES)
