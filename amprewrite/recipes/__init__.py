"""Recipes: which rules run on a module, chosen from its analysis and the options.

A recipe is data: a name, a condition, how it sets up the rules' shared context (the
decisions every rule reads: names, the scaler, the output style), the rules it runs in order,
and whether its output is rewritten again (a migration's FP32 result gets the opt level's
rewrite). The first recipe whose condition holds runs; the engine does the rest.
"""

from __future__ import annotations

from amprewrite.analysis import ModuleAnalysis
from amprewrite.options import Options
from amprewrite.recipes import existing_amp, frameworks, migrations, mixed_precision, nothing
from amprewrite.recipes.recipe import Recipe


def recipes() -> tuple[Recipe, ...]:
    """Every recipe, in the order they are tried."""
    return (
        migrations.APEX_AND_RAY,
        frameworks.FRAMEWORK_SWITCH,  # before REVERT: at O0 it takes its own run-time choice out
        existing_amp.REVERT,
        frameworks.TRAINER_APIS,
        migrations.DEPRECATED_TORCH_AMP,
        existing_amp.LINT,
        nothing.FP32_ALREADY,
        nothing.MODEL_MODULE,
        nothing.NOTHING_TO_REWRITE,
        nothing.PROJECT_AMP,
        nothing.SCALED_STATISTICS,
        mixed_precision.MIXED_PRECISION,
    )


def choose(analysis: ModuleAnalysis, options: Options) -> Recipe:
    """The first recipe that applies (the last one always does)."""
    return next(recipe for recipe in recipes() if recipe.applies(analysis, options))
