"""The mixed-precision recipe for O1-O3: which rules run, in which output style.

O1 is autocast around forward passes and losses with dynamic loss scaling. O2/O3 add
`scaler.initialize(model, optimizer)` after each optimizer is built (the runtime casts the
model, and keeps master weights at O2); their autocast regions stay in the script, inactive
unless `AMPREWRITE_OPT_LEVEL=O1` switches the same script to O1.
"""

from __future__ import annotations

import libcst as cst

from amprewrite.analysis import ModuleAnalysis
from amprewrite.analysis.names import receiver_key
from amprewrite.analysis.scaler_home import find_scaler_home
from amprewrite.options import Options
from amprewrite.rules.autocast import (
    EVALUATION_WRAPPED,
    FORWARD_WRAPPED,
    PRODUCER_WRAPPED,
    SHARED_HELPER_WRAPPED,
    wrap_regions,
)
from amprewrite.rules.checkpoint import checkpoint_scaler
from amprewrite.rules.context import RuleContext
from amprewrite.rules.custom_function import decorate_custom_functions
from amprewrite.rules.distributions import float32_distributions
from amprewrite.rules.escapes import cast_escapes
from amprewrite.rules.float16_constants import fit_fills_to_dtype
from amprewrite.rules.function_regions import float32_arguments
from amprewrite.rules.loss_scaling import (
    add_updates,
    add_updates_at,
    route_steps,
    scale_backwards,
)
from amprewrite.rules.model_casting import clip_master_weights, initialize_models
from amprewrite.rules.reproducibility import seed_everything
from amprewrite.rules.scaler_creation import create_scaler
from amprewrite.rules.scheduler import guard_schedulers
from amprewrite.rules.styles import Needs, plain_style, runtime_style
from amprewrite.rules.unsafe_loss import float32_inputs, report_saturation
from amprewrite.rules.unscaling import unscale_before_use
from amprewrite.transform import Insert


def plan_rewrite(analysis: ModuleAnalysis, options: Options) -> RuleContext:
    """Plan the rewrite of a module with training steps, evaluation passes or custom
    autograd Functions."""
    facts, training, checkpoints = analysis.facts, analysis.training, analysis.checkpoints
    regions = [analysis.training_regions, analysis.evaluation_regions,
               analysis.helper_regions, analysis.producer_regions]
    needs = Needs(
        scaler=training.found and not (options.plain and options.dtype == "bfloat16"),
        autocast=any(split.autocasts for split in regions) and not analysis.escapes.stuck,
        custom_functions=bool(analysis.custom_functions),
        sharded=analysis.sharded,
        reproducible=options.reproducible,
    )
    style = (plain_style if options.plain else runtime_style)(facts, options, needs)
    ctx = RuleContext(facts, options, style.autocast)
    for split, code, what in (
        (analysis.training_regions, FORWARD_WRAPPED, "forward pass and loss"),
        (analysis.evaluation_regions, EVALUATION_WRAPPED, "evaluation forward pass"),
        (analysis.helper_regions, SHARED_HELPER_WRAPPED,
         "forward pass and loss of a helper that training shares with other callers"),
        (analysis.producer_regions, PRODUCER_WRAPPED,
         "forward pass whose outputs a later loss reads"),
    ):
        if not analysis.escapes.stuck:
            wrap_regions(ctx, split.regions, code, what)
            float32_inputs(ctx, split.moved_out)
    if not analysis.escapes.stuck:
        float32_arguments(ctx, analysis.function_regions)
        fit_fills_to_dtype(ctx, analysis.float16_constants)
        float32_distributions(ctx, analysis.distribution_inputs)
    cast_escapes(ctx, analysis.escapes)
    report_saturation(ctx, analysis.saturating)
    if style.decorators is not None and analysis.custom_functions:
        decorate_custom_functions(ctx, analysis.custom_functions, style.decorators)
    if needs.scaler:
        builds = analysis.optimizer_builds if options.casts_model else []
        uses = [*training.backwards, *training.steps, *(b.binding for b in builds),
                *(s.site for s in checkpoints.saved), *(r.site for r in checkpoints.restored)]
        optimizers = {receiver_key(s.call.func.value) for s in training.steps}  # type: ignore[attr-defined]
        home = find_scaler_home(facts, uses, optimizers, _global_index(analysis, options))
        ctx.scaler_expr = home.expression
        code = create_scaler(ctx, home, style.scaler, facts.header_imports_end)
        if code is not None:
            style.definitions.append(code)
        initialize_models(ctx, builds, analysis.kinds, home)
        scale_backwards(ctx, training.backwards)
        route_steps(ctx, training.steps)
        guard_schedulers(ctx, analysis.schedulers)
        add_updates(ctx, training.updates_after)
        add_updates_at(ctx, training.updates_at)
        unscale_before_use(ctx, training.unscales)
        if options.casts_model and options.uses_master_weights:
            clip_master_weights(ctx, training.clips)
        checkpoint_scaler(ctx, checkpoints)
    if options.reproducible:
        seed_everything(ctx, analysis.entry, analysis.loaders, style.seeding)
    header = [ctx.parse_statement(code) for code in style.imports]
    for position, code in enumerate(style.definitions):
        line = ctx.parse_statement(code)
        header.append(line.with_changes(leading_lines=[cst.EmptyLine()]) if position == 0 else line)
    # The header goes first among the inserts at its index (before any statement it precedes).
    ctx.plan.inserts.insert(0, Insert(facts.module, facts.header_imports_end, header))
    return ctx


def _global_index(analysis: ModuleAnalysis, options: Options) -> int:
    """Where a module-global scaler goes: after the imports, unless its arguments come from
    the script (`GradScaler(args.opt_level)` after an apex migration): then right after the
    module-level optimizer build, where those names exist."""
    facts = analysis.facts
    if options.scaler_arguments:
        module_level = [facts.position(b.binding.statement)[1] for b in analysis.optimizer_builds
                        if b.binding.function is None
                        and facts.statements[b.binding.statement].parent is None]
        if module_level:
            return max(module_level) + 1
    return facts.header_imports_end
