"""O1: autocast around forward passes and losses, dynamic loss scaling (apex O1 on torch.amp)."""

from __future__ import annotations

import libcst as cst

from amprewrite.analysis.checkpoints import Checkpoints
from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.scaler_home import find_scaler_home, fresh_name
from amprewrite.analysis.training_step import Region, TrainingSteps
from amprewrite.options import Options
from amprewrite.rules.autocast import wrap_regions
from amprewrite.rules.checkpoint import checkpoint_scaler
from amprewrite.rules.context import RuleContext
from amprewrite.rules.imports import runtime_import, torch_name
from amprewrite.rules.loss_scaling import add_updates, route_steps, scale_backwards
from amprewrite.rules.scaler_creation import create_scaler
from amprewrite.rules.unscaling import unscale_before_use
from amprewrite.transform import Insert


def plan_o1(
    facts: ModuleFacts,
    training: TrainingSteps,
    evaluation: list[Region],
    checkpoints: Checkpoints,
    options: Options,
) -> RuleContext:
    """Plan the O1 rewrite of a module with training steps and/or evaluation passes."""
    scaling = training.found and not (options.plain and options.dtype == "bfloat16")
    imports, definitions, autocast_call, constructor = (
        _plain_style(facts, options) if options.plain else _runtime_style(facts, options, scaling)
    )
    ctx = RuleContext(facts, options, autocast_call)
    wrap_regions(ctx, training.regions, "AMP101", "forward pass and loss")
    wrap_regions(ctx, evaluation, "AMP106", "evaluation forward pass")
    if scaling:
        uses = [*training.backwards, *training.steps,
                *(s.site for s in checkpoints.saved), *(r.site for r in checkpoints.restored)]
        home = find_scaler_home(facts, uses, facts.header_imports_end)
        ctx.scaler_expr = home.expression
        code = create_scaler(ctx, home, constructor)
        if home.scope == "global":
            definitions.append(code)
        scale_backwards(ctx, training.backwards)
        route_steps(ctx, training.steps)
        add_updates(ctx, training.updates_after)
        unscale_before_use(ctx, training.unscales)
        checkpoint_scaler(ctx, checkpoints)
    header = [ctx.parse_statement(code) for code in imports]
    for position, code in enumerate(definitions):
        line = ctx.parse_statement(code)
        header.append(line.with_changes(leading_lines=[cst.EmptyLine()]) if position == 0 else line)
    # The header goes first among the inserts at its index (before any statement it precedes).
    ctx.plan.inserts.insert(0, Insert(facts.module, facts.header_imports_end, header))
    return ctx


def _runtime_style(
    facts: ModuleFacts, options: Options, scaling: bool
) -> tuple[list[str], list[str], str, str]:
    symbols = ["GradScaler", "autocast"] if scaling else ["autocast"]
    import_code, local = runtime_import(facts, symbols)
    dtype = f'dtype="{options.dtype}"' if options.dtype else ""
    constructor = f"{local['GradScaler']}({dtype})" if scaling else ""
    return [import_code], [], f"{local['autocast']}({dtype})", constructor


def _plain_style(facts: ModuleFacts, options: Options) -> tuple[list[str], list[str], str, str]:
    torch = torch_name(facts)
    imports = [] if torch else ["import torch"]
    torch = torch or "torch"
    device = fresh_name(facts, ("amp_device", "autocast_device"))
    definition = f'{device} = "cuda" if {torch}.cuda.is_available() else "cpu"'
    dtype = f", dtype={torch}.{options.dtype}" if options.dtype else ""
    if options.dtype == "float16":
        constructor = f"{torch}.amp.GradScaler({device})"
    else:
        constructor = f'{torch}.amp.GradScaler({device}, enabled={device} == "cuda")'
    return imports, [definition], f"{torch}.autocast({device}{dtype})", constructor
