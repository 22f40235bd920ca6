"""Migrations: take apex.amp, Ray Train's AMP helpers or the deprecated `torch.cuda.amp` out
(or up to date), then rewrite the result at the script's own opt level."""

from __future__ import annotations

from amprewrite.recipes.recipe import Recipe, plain_context
from amprewrite.rules import migrate_apex, migrate_ray, migrate_torch_cuda_amp

APEX_AND_RAY = Recipe(
    name="migrate-apex-and-ray",
    applies=lambda analysis, options: bool(analysis.apex or analysis.ray),
    context=plain_context,
    rules=(migrate_apex.RULE, migrate_ray.RULE),
    rewrites_result=lambda options: options.opt_level != "O0",
    result_goes_fp32=True,
)

DEPRECATED_TORCH_AMP = Recipe(
    name="migrate-torch-cuda-amp",
    applies=lambda analysis, options: (bool(analysis.deprecated)
                                       and not analysis.deprecated.values),
    context=plain_context,
    rules=(migrate_torch_cuda_amp.RULE,),
    rewrites_result=lambda options: True,
)
