"""Report calls kept out of autocast and cast the low-precision values passed to them."""

from __future__ import annotations

from amprewrite.analysis.function_regions import FunctionRegions
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, declare
from amprewrite.rules.context import RuleContext
from amprewrite.rules.expressions import as_float
from amprewrite.transform import Replace

CAST_WHERE_LEAVING_AUTOCAST = declare(
    "AMP109", CHANGE, "low-precision value cast to float32 where it leaves autocast",
    "Passed to code that runs outside autocast (a function running its own backward) or that "
    "needs float32 (`torch.distributions` argument checks).",
)


def float32_arguments(ctx: RuleContext, placed: FunctionRegions) -> None:
    ctx.notes.extend(placed.notes)
    for value in placed.casts:
        ctx.plan.replaces.append(Replace(value, as_float))
        text = " ".join(ctx.facts.module.code_for_node(value).split())
        ctx.notes.append(Note(CAST_WHERE_LEAVING_AUTOCAST, value,
                              f"`{text}` leaves autocast here: cast to float32 "
                              "for code that needs it"))
