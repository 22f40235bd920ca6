"""Recipes that change nothing (or only what is right in every dtype) and say why."""

from __future__ import annotations

from amprewrite.recipes.recipe import Recipe, plain_context
from amprewrite.rules import (
    fp32_asked,
    model_module_constants,
    nothing_found,
    project_amp_kept,
    scaled_hook_statistics,
)

FP32_ALREADY = Recipe(
    name="fp32-asked",
    applies=lambda analysis, options: options.opt_level == "O0",
    context=plain_context,
    rules=(fp32_asked.RULE,),
)

NOTHING_TO_REWRITE = Recipe(
    name="nothing-to-rewrite",
    applies=lambda analysis, options: not analysis.has_work,
    context=plain_context,
    rules=(nothing_found.RULE,),
)

MODEL_MODULE = Recipe(
    name="model-module",
    applies=lambda analysis, options: (options.opt_level != "O0" and not analysis.has_work
                                       and bool(analysis.model_fills.fills
                                                 or analysis.model_data_inits)),
    context=plain_context,
    rules=(model_module_constants.RULE,),
)

PROJECT_AMP = Recipe(
    name="project-amp",
    applies=lambda analysis, options: (options.project_amp is not None
                                       and not analysis.training.found
                                       and bool(analysis.evaluation_regions.regions)),
    context=plain_context,
    rules=(project_amp_kept.RULE,),
)

SCALED_STATISTICS = Recipe(
    name="scaled-hook-statistics",
    applies=scaled_hook_statistics.applies,
    context=plain_context,
    rules=(scaled_hook_statistics.RULE,),
)
