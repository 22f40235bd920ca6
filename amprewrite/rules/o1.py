"""O1: autocast around forward passes and losses, dynamic loss scaling (apex O1 on torch.amp)."""

from __future__ import annotations

import libcst as cst

from amprewrite.analysis import ModuleAnalysis
from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.scaler_home import find_scaler_home, fresh_name
from amprewrite.options import Options
from amprewrite.rules.autocast import wrap_regions
from amprewrite.rules.checkpoint import checkpoint_scaler
from amprewrite.rules.context import RuleContext
from amprewrite.rules.imports import runtime_import, torch_name
from amprewrite.rules.loss_scaling import add_updates, route_steps, scale_backwards
from amprewrite.rules.scaler_creation import create_scaler
from amprewrite.rules.scheduler import guard_schedulers
from amprewrite.rules.unsafe_loss import float32_inputs
from amprewrite.rules.unscaling import unscale_before_use
from amprewrite.transform import Insert


def plan_o1(analysis: ModuleAnalysis, options: Options) -> RuleContext:
    """Plan the O1 rewrite of a module with training steps and/or evaluation passes."""
    facts, training, checkpoints = analysis.facts, analysis.training, analysis.checkpoints
    scaling = training.found and not (options.plain and options.dtype == "bfloat16")
    imports, definitions, autocast_call, constructor = (
        _plain_style(facts, options, analysis.sharded) if options.plain
        else _runtime_style(facts, options, scaling, analysis.sharded)
    )
    ctx = RuleContext(facts, options, autocast_call)
    for split, code, what in (
        (analysis.training_regions, "AMP101", "forward pass and loss"),
        (analysis.evaluation_regions, "AMP106", "evaluation forward pass"),
    ):
        wrap_regions(ctx, split.regions, code, what)
        float32_inputs(ctx, split.moved_out, split.inline)
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
        guard_schedulers(ctx, analysis.schedulers)
        add_updates(ctx, training.updates_after)
        unscale_before_use(ctx, training.unscales)
        checkpoint_scaler(ctx, checkpoints)
    facts = analysis.facts
    header = [ctx.parse_statement(code) for code in imports]
    for position, code in enumerate(definitions):
        line = ctx.parse_statement(code)
        header.append(line.with_changes(leading_lines=[cst.EmptyLine()]) if position == 0 else line)
    # The header goes first among the inserts at its index (before any statement it precedes).
    ctx.plan.inserts.insert(0, Insert(facts.module, facts.header_imports_end, header))
    return ctx


def _runtime_style(
    facts: ModuleFacts, options: Options, scaling: bool, sharded: bool
) -> tuple[list[str], list[str], str, str]:
    symbols = ["GradScaler", "autocast"] if scaling else ["autocast"]
    import_code, local = runtime_import(facts, symbols)
    dtype = f'dtype="{options.dtype}"' if options.dtype else ""
    arguments = ", ".join(a for a in (dtype, "sharded=True" if sharded else "") if a)
    constructor = f"{local['GradScaler']}({arguments})" if scaling else ""
    return [import_code], [], f"{local['autocast']}({dtype})", constructor


def _plain_style(
    facts: ModuleFacts, options: Options, sharded: bool
) -> tuple[list[str], list[str], str, str]:
    torch = torch_name(facts)
    imports = [] if torch else ["import torch"]
    torch = torch or "torch"
    device = fresh_name(facts, ("amp_device", "autocast_device"))
    definition = f'{device} = "cuda" if {torch}.cuda.is_available() else "cpu"'
    dtype = f", dtype={torch}.{options.dtype}" if options.dtype else ""
    scaler_class = f"{torch}.amp.GradScaler"
    if sharded:
        imports.append("from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler")
        scaler_class = "ShardedGradScaler"
    if options.dtype == "float16":
        constructor = f"{scaler_class}({device})"
    else:
        constructor = f'{scaler_class}({device}, enabled={device} == "cuda")'
    return imports, [definition], f"{torch}.autocast({device}{dtype})", constructor
