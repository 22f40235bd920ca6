"""Unscale gradients before anything between backward and step looks at them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis.facts import Statement
from amprewrite.analysis.training_step import Note
from amprewrite.analysis.unscaling import Unscale
from amprewrite.catalog import CHANGE, declare
from amprewrite.rules.context import RuleContext
from amprewrite.rules.registry import Example, rule
from amprewrite.transform import Insert

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis


GRADIENTS_UNSCALED = declare(
    "AMP110", CHANGE, "gradients unscaled before clipping or reading them",
    "`scaler.unscale_(optimizer)` runs once per step, before the first code between backward and "
    "step that clips or reads `.grad`, or that amprewrite cannot see into (a helper from another "
    "module, a star import or a library) and is handed the model or the optimizer.",
    why=(
        "Code between the scaled backward and the optimizer step clips or reads "
        "`.grad`, or may do so unseen, and would otherwise see scaled gradients."
    ),
)


def unscale_before_use(ctx: RuleContext, points: list[Unscale]) -> None:
    seen: set[tuple[int, str]] = set()
    for point in points:
        optimizer = ctx.facts.one_line(point.optimizer)
        if (id(point.statement), optimizer) in seen:
            continue
        seen.add((id(point.statement), optimizer))
        code = f"{ctx.scaler_expr}.unscale_({optimizer})"
        block, index = ctx.facts.position(point.statement)
        if point.iterate is None:
            line: Statement = ctx.parse_statement(code)
        else:  # the optimizers are a container's elements: unscale each of them
            code = f"for {optimizer} in {point.iterate}:\n    {code}\n"
            line = cst.parse_statement(code, config=ctx.facts.module.config_for_parsing)
            code = " ".join(code.split())
        ctx.plan.inserts.append(Insert(block, index, [line]))
        ctx.notes.append(Note(GRADIENTS_UNSCALED, point.statement,
                              f"`{code}` added before {point.reason}, so it sees true gradients"))


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    if ctx.scaler_expr is not None:
        unscale_before_use(ctx, analysis.training.unscales)


_UNSCALING_EXAMPLES = (
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
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
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
""",
        codes=(GRADIENTS_UNSCALED,),
    ),
    Example(
        before="""\
import torch
from utils import *

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    print(f"loss {loss.item():.3f}")
    clip_gradient(optimizer, 5.0)
    optimizer.step()
""",
        after="""\
import torch
from amprewrite_runtime import GradScaler, autocast
from utils import *

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = GradScaler()
for x, y in loader:
    optimizer.zero_grad()
    with autocast():
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    print(f"loss {loss.item():.3f}")
    scaler.unscale_(optimizer)
    clip_gradient(optimizer, 5.0)
    scaler.step(optimizer)
    scaler.update()
""",
        codes=(GRADIENTS_UNSCALED,),
    ),
)


RULE = rule("unscaling", (GRADIENTS_UNSCALED,), _plan,
            examples=_UNSCALING_EXAMPLES)
