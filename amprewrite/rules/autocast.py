"""Wrap forward passes and loss computations in an autocast block."""

from __future__ import annotations

from amprewrite.analysis.training_step import Note, Region
from amprewrite.rules.context import RuleContext
from amprewrite.transform import Wrap


def wrap_regions(ctx: RuleContext, regions: list[Region], code: str, what: str) -> None:
    for region in regions:
        item = ctx.parse_expression(ctx.autocast_call)
        ctx.plan.wraps.append(Wrap(region.block, region.start, region.end, item))
        first = region.block.body[region.start]
        ctx.notes.append(Note(code, first, f"{what} wrapped in `with {ctx.autocast_call}:`"))
