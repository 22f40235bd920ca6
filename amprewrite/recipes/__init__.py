"""Recipes: which rules run on a module, chosen from its analysis and the options.

A recipe is data: a name, a condition, how it sets up the rules' shared context (the
decisions every rule reads: names, the scaler, the output style), the rules it runs in order,
and whether its output is rewritten again (a migration's FP32 result gets the opt level's
rewrite). The first recipe whose condition holds runs; the engine does the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from amprewrite.analysis import ModuleAnalysis
from amprewrite.options import Options
from amprewrite.rules.context import RuleContext
from amprewrite.rules.registry import Rule


@dataclass(frozen=True)
class Recipe:
    """A named choice of rules, in the order they plan."""

    name: str
    applies: Callable[[ModuleAnalysis, Options], bool]
    context: Callable[[ModuleAnalysis, Options], RuleContext]
    rules: tuple[Rule, ...]
    # Called once the rules have planned (module-level imports and definitions, notes about
    # the whole file); None: nothing more.
    finish: Callable[[RuleContext, ModuleAnalysis], None] | None = None
    # Whether the result is rewritten again with these options (a migration); None: never.
    rewrites_result: Callable[[Options], bool] | None = None


def plain_context(analysis: ModuleAnalysis, options: Options) -> RuleContext:
    """A context with no autocast and no scaler decided: for rules that remove or lint."""
    return RuleContext(analysis.facts, options, "")


def recipes() -> tuple[Recipe, ...]:
    """Every recipe, in the order they are tried."""
    from amprewrite.recipes import existing_amp, frameworks, migrations, mixed_precision, nothing

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
        mixed_precision.MIXED_PRECISION,
    )


def choose(analysis: ModuleAnalysis, options: Options) -> Recipe:
    """The first recipe that applies (the last one always does)."""
    return next(recipe for recipe in recipes() if recipe.applies(analysis, options))
