"""Recipes for code whose framework owns precision (Accelerate, Lightning, Hugging Face,
TRL, DeepSpeed) or whose trainer API takes a torch grad scaler (Determined, Enchanter)."""

from __future__ import annotations

from amprewrite.analysis import ModuleAnalysis
from amprewrite.options import Options
from amprewrite.recipes.mixed_precision import place_header
from amprewrite.recipes.recipe import Recipe, plain_context
from amprewrite.rules import autocast, framework_switch, trainer_apis
from amprewrite.rules.context import RuleContext
from amprewrite.rules.imports import torch_name
from amprewrite.rules.styles import Style


def _switch_context(analysis: ModuleAnalysis, options: Options) -> RuleContext:
    """A context whose style collects the import or definition of a run-time dtype choice."""
    ctx = plain_context(analysis, options)
    ctx.style = Style()
    return ctx


def _switch_header(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    if ctx.style is not None and (ctx.style.imports or ctx.style.definitions):
        place_header(ctx, analysis)


FRAMEWORK_SWITCH = Recipe(
    name="framework-switch",
    owns_precision=True,
    applies=lambda analysis, options: analysis.framework is not None,
    context=_switch_context,
    rules=(framework_switch.RULE,),
    finish=_switch_header,
)


def _trainer_context(analysis: ModuleAnalysis, options: Options) -> RuleContext:
    """These APIs train on GPUs: plain `torch.autocast("cuda")`."""
    torch = torch_name(analysis.facts) or "torch"
    ctx = RuleContext(analysis.facts, options, f'{torch}.autocast("cuda")')
    autocast.decide_hoisted_losses(ctx, [region for trainer in analysis.trainer_apis.classes
                                         for region in [*trainer.regions, *trainer.eval_regions]])
    return ctx


TRAINER_APIS = Recipe(
    name="trainer-apis",
    owns_precision=True,
    applies=lambda analysis, options: (bool(analysis.trainer_apis)
                                       and analysis.existing_amp is None
                                       and options.opt_level != "O0"),
    context=_trainer_context,
    rules=(trainer_apis.RULE,),
)
