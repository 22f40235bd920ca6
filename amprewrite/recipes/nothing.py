"""Recipes that change nothing and say why."""

from __future__ import annotations

from amprewrite.recipes import Recipe, plain_context
from amprewrite.rules import nothing_to_do

FP32_ALREADY = Recipe(
    name="fp32-asked",
    applies=lambda analysis, options: options.opt_level == "O0",
    context=plain_context,
    rules=(nothing_to_do.FP32_ASKED,),
)

NOTHING_TO_REWRITE = Recipe(
    name="nothing-to-rewrite",
    applies=lambda analysis, options: not analysis.has_work,
    context=plain_context,
    rules=(nothing_to_do.NOTHING_FOUND,),
)
