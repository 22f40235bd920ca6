"""Recipes for modules that already use AMP: revert amprewrite's own at O0, lint the rest."""

from __future__ import annotations

from amprewrite.analysis import ModuleAnalysis
from amprewrite.options import Options
from amprewrite.recipes.recipe import Recipe, plain_context
from amprewrite.rules import lint_fixes, own_amp_kept, revert_to_fp32
from amprewrite.rules.context import RuleContext


def _kept(analysis: ModuleAnalysis, options: Options) -> bool:
    """The file's own AMP is kept as written: its training runs it, or its only AMP is an
    optional apex path that `--plain`, having no opt level, cannot turn the scaler off for."""
    return analysis.existing_amp is not None and (not analysis.partial_amp or (
        options.plain and analysis.amp_in_training.optional_apex is not None))


REVERT = Recipe(
    name="revert-to-fp32",
    applies=lambda analysis, options: options.opt_level == "O0" and _kept(analysis, options),
    context=plain_context,
    rules=(revert_to_fp32.RULE,),
)



def _lint_context(analysis: ModuleAnalysis, options: Options) -> RuleContext:
    """Fixes use the script's own scaler (the first one it creates)."""
    ctx = plain_context(analysis, options)
    ctx.scaler_expr = analysis.amp_mistakes.scaler
    return ctx


LINT = Recipe(
    name="lint",
    owns_precision=True,
    applies=_kept,
    context=_lint_context,
    rules=(lint_fixes.RULE, own_amp_kept.RULE),
)
