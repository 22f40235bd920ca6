"""Scale each loss before backward, step each optimizer through the scaler, update once."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis.scaler_protocol import UpdatePoint
from amprewrite.analysis.sites import BackwardSite, StepSite
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, declare
from amprewrite.rules.context import RuleContext
from amprewrite.rules.registry import Example, rule
from amprewrite.rules.shared_examples import MIXED_PRECISION_ALREADY
from amprewrite.transform import Insert, InsertAfterSmall, Replace

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis


BACKWARD_SCALED = declare(
    "AMP102", CHANGE, "backward pass scaled",
    "The loss is multiplied by the scale before backward.",
    why=(
        "A loss's `.backward()` feeds an optimizer step that the scaler drives, so the "
        "loss must be scaled to keep small float16 gradients from underflowing."
    ),
)

STEP_ROUTED = declare(
    "AMP104", CHANGE, "optimizer step routed through the scaler",
    "`scaler.step(optimizer)` unscales the gradients and skips inf/NaN steps.",
    why=(
        "An optimizer step follows a scaled backward: `scaler.step` must unscale the "
        "gradients and skip steps with inf or NaN."
    ),
)

UPDATE_ADDED = declare(
    "AMP105", CHANGE, "scaler update added",
    "`scaler.update()` runs once per iteration, after the last optimizer step.",
    why=(
        "The iteration steps an optimizer through the scaler, and the scale must adapt "
        "once per iteration."
    ),
)


def scale_backwards(ctx: RuleContext, backwards: list[BackwardSite]) -> None:
    assert ctx.scaler_expr is not None
    scale = ctx.parse_expression(f"{ctx.scaler_expr}.scale")
    for site in backwards:
        loss_text = ctx.hoisted.get(id(site.call)) or ctx.facts.one_line(
            site.loss.with_changes(lpar=[], rpar=[]))
        if site.method:
            ctx.plan.replaces.append(Replace(site.call, partial(_scale_receiver, scale=scale)))
            what = "`.backward()`"
        else:
            position = site.call.args.index(next(a for a in site.call.args
                                                 if a.value is site.loss))
            ctx.plan.replaces.append(Replace(site.call, partial(
                _scale_argument, scale=scale, position=position)))
            what = f"`{ctx.facts.one_line(site.call.func)}(...)`"
        scaled = f"{ctx.scaler_expr}.scale({loss_text})"
        ctx.notes.append(Note(BACKWARD_SCALED, site.call, f"{what} of `{loss_text}` scaled: "
                              f"`{scaled}`"))


def _scale_receiver(node: cst.CSTNode, scale: cst.BaseExpression) -> cst.CSTNode:
    """`loss.backward()` -> `scaler.scale(loss).backward()`."""
    assert isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
    loss = node.func.value
    if loss.lpar:  # `(loss / n).backward()` -> `scaler.scale(loss / n).backward()`
        loss = loss.with_changes(lpar=[], rpar=[])
    scaled = cst.Call(func=scale, args=[cst.Arg(value=loss)])
    return node.with_changes(func=node.func.with_changes(value=scaled))


def _scale_argument(node: cst.CSTNode, scale: cst.BaseExpression, position: int) -> cst.CSTNode:
    """`torch.autograd.backward([l1, l2])` -> `torch.autograd.backward(scaler.scale([l1, l2]))`
    (the argument at `position`)."""
    assert isinstance(node, cst.Call)
    args = list(node.args)
    scaled = cst.Call(func=scale, args=[cst.Arg(value=args[position].value)])
    args[position] = args[position].with_changes(value=scaled)
    return node.with_changes(args=args)


def route_steps(ctx: RuleContext, steps: list[StepSite]) -> None:
    assert ctx.scaler_expr is not None
    step = ctx.parse_expression(f"{ctx.scaler_expr}.step")
    for site in steps:
        optimizer_text = ctx.facts.one_line(site.optimizer)

        def build(node: cst.CSTNode, step: cst.BaseExpression = step) -> cst.CSTNode:
            assert isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
            return node.with_changes(func=step, args=[cst.Arg(value=node.func.value)])

        ctx.plan.replaces.append(Replace(site.call, build))
        ctx.notes.append(Note(STEP_ROUTED, site.call, f"`{optimizer_text}.step()` routed through "
                              f"`{ctx.scaler_expr}.step({optimizer_text})`"))


def add_updates(
    ctx: RuleContext, after: list[StepSite], per_step: frozenset[int] = frozenset()
) -> None:
    """`scaler.update()` right after each last optimizer step of an iteration (after every
    step, for those in `per_step`, by the ids of their calls)."""
    assert ctx.scaler_expr is not None
    code = f"{ctx.scaler_expr}.update()"
    for site in after:
        small = site.small
        assert small is not None
        container = ctx.facts.small_containers[small]
        lines = [ctx.parse_statement(code)]
        before = ctx.scale_before_update.get(id(site.call))
        if before is not None:  # plain style, a guarded scheduler follows
            lines.insert(0, ctx.parse_statement(f"{before} = {ctx.scaler_expr}.get_scale()"))
        if isinstance(container, cst.SimpleStatementLine) and len(container.body) == 1:
            block, index = ctx.facts.position(container)
            ctx.plan.inserts.append(Insert(block, index + 1, lines))
        else:
            smalls = [line.body[0] for line in lines]
            ctx.plan.small_inserts.append(InsertAfterSmall(small, smalls))
        ctx.notes.append(Note(UPDATE_ADDED, site.call, f"`{code}` added after "
                              + (_EACH_STEP if id(site.call) in per_step
                                 else "the last optimizer step of the iteration")))


# Where one optimizer steps twice in an iteration (lazy regularisation): one update per step.
_EACH_STEP = ("this step, as after every step of the iteration (or script): an optimizer "
              "steps more than once in it")


def add_updates_at(
    ctx: RuleContext, points: list[UpdatePoint], per_step: frozenset[int] = frozenset()
) -> None:
    """`scaler.update()` where a path leaves the iteration, or once after the statement
    holding the iteration's last step, when no single step is last on every path."""
    assert ctx.scaler_expr is not None
    code = f"{ctx.scaler_expr}.update()"
    for point in points:
        line = ctx.parse_statement(code)
        node = point.node
        if isinstance(node, cst.SimpleStatementSuite):  # `if bad: continue` -> a block
            def build(suite: cst.CSTNode, line: cst.SimpleStatementLine = line) -> cst.CSTNode:
                assert isinstance(suite, cst.SimpleStatementSuite)
                exit_line = cst.SimpleStatementLine(body=suite.body)
                return cst.IndentedBlock(body=[line, exit_line])

            ctx.plan.replaces.append(Replace(node, build))
            where = "before leaving the iteration"
        else:
            block, index = ctx.facts.position(node)
            ctx.plan.inserts.append(Insert(block, index if point.before else index + 1, [line]))
            where = "before leaving the iteration" if point.before else (
                f"after {_EACH_STEP}" if id(node) in per_step
                else "after the last optimizer step on every path of the iteration")
        ctx.notes.append(Note(UPDATE_ADDED, node, f"`{code}` added {where}"))


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    if ctx.scaler_expr is None:
        return
    scale_backwards(ctx, analysis.training.backwards)
    route_steps(ctx, analysis.training.steps)
    per_step = frozenset(analysis.training.updated_per_step)
    add_updates(ctx, analysis.training.updates_after, per_step)
    add_updates_at(ctx, analysis.training.updates_at, per_step)


_LOSS_SCALING_EXAMPLES = (
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
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
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        codes=(BACKWARD_SCALED, STEP_ROUTED, UPDATE_ADDED),
    ),
    Example(
        before=MIXED_PRECISION_ALREADY,
        after=None,
        codes=(),
    ),
)


RULE = rule("loss-scaling", (BACKWARD_SCALED, STEP_ROUTED, UPDATE_ADDED), _plan,
            examples=_LOSS_SCALING_EXAMPLES)
