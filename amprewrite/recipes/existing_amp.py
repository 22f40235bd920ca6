"""Recipes for modules that already use AMP: revert amprewrite's own at O0, lint the rest."""

from __future__ import annotations

from amprewrite.analysis import ModuleAnalysis
from amprewrite.options import Options
from amprewrite.recipes.recipe import Recipe, plain_context
from amprewrite.rules import lint_fixes, own_amp_kept, revert_to_fp32
from amprewrite.rules.context import RuleContext

REVERT = Recipe(
    name="revert-to-fp32",
    applies=lambda analysis, options: (options.opt_level == "O0"
                                       and analysis.existing_amp is not None
                                       and not analysis.partial_amp),
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
    applies=lambda analysis, options: (analysis.existing_amp is not None
                                       and not analysis.partial_amp),
    context=_lint_context,
    rules=(lint_fixes.RULE, own_amp_kept.RULE),
)
