"""O2/O3: initialize each model with its optimizer; clip the weights the optimizer steps."""

from __future__ import annotations

from amprewrite.analysis.kinds import KindTable
from amprewrite.analysis.optimizer_builds import OptimizerBuild
from amprewrite.analysis.scaler_home import ScalerHome
from amprewrite.analysis.training_step import Note
from amprewrite.analysis.unscaling import Clip
from amprewrite.catalog import CHANGE, SKIP, declare
from amprewrite.rules.context import RuleContext
from amprewrite.transform import Insert, Replace

MODEL_INITIALIZED = declare(
    "AMP160", CHANGE, "model initialized for the opt level",
    "At O2/O3 `scaler.initialize(model, optimizer)` casts the model (batchnorm kept FP32 where "
    "asked), casts inputs at forward and creates master weights.",
)

CLIPPING_ON_MASTER_WEIGHTS = declare(
    "AMP161", CHANGE, "clipping moved to the master weights",
    "With master weights the optimizer steps FP32 copies; clipping acts on them (apex's "
    "`amp.master_params(optimizer)`).",
)

MODEL_NOT_INITIALIZED = declare(
    "AMP260", SKIP, "model not initialized for O2/O3",
    "The optimizer's model is unknown or already wrapped by DDP/FSDP: call "
    "`scaler.initialize(model, optimizer)` by hand, before any wrapping.",
)

_WRAPPERS = ("DistributedDataParallel", "FullyShardedDataParallel", "DataParallel")


def initialize_models(
    ctx: RuleContext, builds: list[OptimizerBuild], kinds: KindTable, home: ScalerHome
) -> None:
    """`scaler.initialize(model, optimizer)` right after each optimizer is built (and after
    the scaler, when the scaler is created further down the same block)."""
    for build in builds:
        statement = build.binding.statement
        wrapped = [m for m in build.models
                   if kinds.constructors.get(m, "").rsplit(".", 1)[-1] in _WRAPPERS]
        if not build.models or wrapped:
            reason = (f"`{wrapped[0]}` is already wrapped for data parallelism; cast the model "
                      "before wrapping it" if wrapped else
                      f"cannot tell which model `{build.optimizer}` trains")
            ctx.notes.append(Note(MODEL_NOT_INITIALIZED, statement,
                                  f"{reason}: add `{ctx.scaler_expr}"
                                  f".initialize(model, {build.optimizer})` by hand"))
            continue
        models = build.models[0] if len(build.models) == 1 else f"[{', '.join(build.models)}]"
        code = f"{ctx.scaler_expr}.initialize({models}, {build.optimizer})"
        block, index = ctx.facts.position(statement)
        index = max(index + 1, home.index) if block is home.block else index + 1
        ctx.plan.inserts.append(Insert(block, index, [ctx.parse_statement(code)]))
        ctx.notes.append(Note(MODEL_INITIALIZED, statement, f"`{code}` casts the model for "
                              f"{ctx.options.opt_level}"))


def clip_master_weights(ctx: RuleContext, clips: list[Clip]) -> None:
    """With master weights the optimizer steps float32 copies: clip those (apex's
    `amp.master_params(optimizer)`)."""
    for clip in clips:
        call = clip.site.call
        if not call.args or call.args[0].keyword is not None:
            continue  # `model.clip_grad_norm_(1.0)`: the model clips its own gradients
        optimizer = ctx.facts.module.code_for_node(clip.optimizer)
        masters = ctx.parse_expression(f"{ctx.scaler_expr}.master_params({optimizer})")
        ctx.plan.replaces.append(Replace(call.args[0].value, lambda _, new=masters: new))
        masters_code = f"{ctx.scaler_expr}.master_params({optimizer})"
        ctx.notes.append(Note(CLIPPING_ON_MASTER_WEIGHTS, call,
                              "clipping applies to the float32 master weights "
                              f"the optimizer steps (`{masters_code}`)"))
