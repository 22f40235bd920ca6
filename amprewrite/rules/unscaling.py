"""Unscale gradients before anything between backward and step looks at them."""

from __future__ import annotations

import libcst as cst

from amprewrite.analysis.facts import Statement
from amprewrite.analysis.training_step import Note
from amprewrite.analysis.unscaling import Unscale
from amprewrite.catalog import CHANGE, declare
from amprewrite.rules.context import RuleContext
from amprewrite.transform import Insert

GRADIENTS_UNSCALED = declare(
    "AMP110", CHANGE, "gradients unscaled before clipping or reading them",
    "`scaler.unscale_(optimizer)` runs once per step, before the first code between backward and "
    "step that clips or reads `.grad`.",
)


def unscale_before_use(ctx: RuleContext, points: list[Unscale]) -> None:
    seen: set[tuple[int, str]] = set()
    for point in points:
        optimizer = " ".join(ctx.facts.module.code_for_node(point.optimizer).split())
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
