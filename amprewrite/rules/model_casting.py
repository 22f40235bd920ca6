"""O2/O3: initialize each model with its optimizer; clip the weights the optimizer steps."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amprewrite.analysis.facts import ModuleFacts, Statement
from amprewrite.analysis.kinds import KindTable
from amprewrite.analysis.names import dotted
from amprewrite.analysis.optimizer_builds import OptimizerBuild
from amprewrite.analysis.scaler_home import ScalerHome
from amprewrite.analysis.sites import StepSite
from amprewrite.analysis.training_step import Note
from amprewrite.analysis.unscaling import Clip
from amprewrite.catalog import CHANGE, SKIP, declare
from amprewrite.options import Options
from amprewrite.rules.context import RuleContext
from amprewrite.rules.edits import replaced_by
from amprewrite.rules.registry import Example, rule
from amprewrite.transform import Insert, Replace

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis


MODEL_INITIALIZED = declare(
    "AMP160", CHANGE, "model initialized for the opt level",
    "At O2/O3 `scaler.initialize(model, optimizer)` casts the model (batchnorm kept FP32 where "
    "asked), casts inputs at forward and creates master weights.",
    why=(
        "The opt level (O2/O3, fixed or chosen at run time) casts the model and creates "
        "master weights."
    ),
)

CLIPPING_ON_MASTER_WEIGHTS = declare(
    "AMP161", CHANGE, "clipping moved to the master weights",
    "With master weights the optimizer steps FP32 copies; clipping acts on them (apex's "
    "`amp.master_params(optimizer)`).",
    why=(
        "At O2/O3 with master weights, gradients are clipped on the model's parameters, "
        "which the optimizer no longer steps."
    ),
)

MODEL_NOT_INITIALIZED = declare(
    "AMP260", SKIP, "model not initialized for O2/O3",
    "The optimizer's model is unknown, already wrapped by DDP/FSDP, the optimizer is built in "
    "a file the rewrite did not link, or code between backward and step reads the model's "
    "`.grad` (with master weights the gradients move to the float32 copies there): call "
    "`scaler.initialize(model, optimizer)` by hand after it is built, before any wrapping "
    "(until then the model trains in float32).",
    why=(
        "At O2/O3 the model of an optimizer is unknown or already wrapped by "
        "DDP/FSDP/DataParallel, the optimizer is built in another file, or its gradients are "
        "read between backward and step."
    ),
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
        arguments = ", ".join([models, build.optimizer, *ctx.initialize_arguments])
        code = f"{ctx.scaler_expr}.initialize({arguments})"
        block, index = ctx.facts.position(statement)
        index = max(index + 1, home.index) if block is home.block else index + 1
        ctx.plan.inserts.append(Insert(block, index, [ctx.parse_statement(code)]))
        message = (f"model cast by `{code}` when the opt level it runs at is O2 or O3"
                   if ctx.level_at_run_time else
                   f"model cast for {ctx.options.opt_level} by `{code}`")
        ctx.notes.append(Note(MODEL_INITIALIZED, statement, message))


def clip_master_weights(ctx: RuleContext, clips: list[Clip]) -> None:
    """With master weights the optimizer steps float32 copies: clip those (apex's
    `amp.master_params(optimizer)`)."""
    for clip in clips:
        call = clip.site.call
        if not call.args or call.args[0].keyword is not None:
            continue  # `model.clip_grad_norm_(1.0)`: the model clips its own gradients
        optimizer = ctx.facts.module.code_for_node(clip.optimizer)
        masters = ctx.parse_expression(f"{ctx.scaler_expr}.master_params({optimizer})")
        ctx.plan.replaces.append(Replace(call.args[0].value, replaced_by(masters)))
        masters_code = f"{ctx.scaler_expr}.master_params({optimizer})"
        ctx.notes.append(Note(CLIPPING_ON_MASTER_WEIGHTS, call,
                              "clipping moved to the float32 master weights "
                              f"the optimizer steps (`{masters_code}`)"))


def _received(step: StepSite, facts: ModuleFacts) -> bool:
    """Whether the optimizer a step steps arrives from outside the module: a parameter of
    the stepping function, or an attribute `__init__` stores from one of its parameters."""
    key = step.key or ""
    if step.function is None:
        return False
    if key.split(".")[0] != "self":
        return key.split(".")[0] in facts.parameters(step.function)[0]
    cls = facts.function_class.get(step.function)
    return cls is not None and key in facts.stored_parameters(cls)


def _without_gradient_readers(
    ctx: RuleContext, builds: list[OptimizerBuild], analysis: ModuleAnalysis
) -> list[OptimizerBuild]:
    """The builds whose optimizer's gradients no code reads between backward and step; the
    others get a note. With master weights `unscale_` moves the model's gradients to the
    float32 copies the optimizer steps, and the model's own `.grad` is None there (a gradient
    norm logged from `model.parameters()` would fail): such a model is left uncast."""
    reads = _gradient_readers(analysis)
    kept = []
    for build in builds:
        line = reads.get(build.optimizer)
        if line is None:
            kept.append(build)
            continue
        where = ctx.facts.one_line(line)
        where = where if len(where) <= 60 else where[:57] + "..."
        ctx.notes.append(Note(MODEL_NOT_INITIALIZED, build.binding.statement,
                              f"`{where}` reads the model's gradients between backward and "
                              f"step, which {ctx.options.opt_level}'s master weights take "
                              "away from the model there: the model is not cast (it trains "
                              "in float32); read them through "
                              f"`{ctx.scaler_expr}.master_params({build.optimizer})` and add "
                              f"`{ctx.scaler_expr}.initialize(model, {build.optimizer})` "
                              "by hand"))
    return kept


def _gradient_readers(analysis: ModuleAnalysis) -> dict[str | None, Statement]:
    """The optimizers whose gradients code between backward and step reads, with that code."""
    return {dotted(step.optimizer): line for line, step in analysis.training.grad_reads}


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    if ctx.scaler_expr is None:
        return
    if ctx.scaler_home is not None:  # else the scaler comes from another module, cast there
        # at O1 too where the scaler's arguments are deferred to it (`opt_level="O0" if
        # args.fp16 else "O1"`, named where the optimizer is built, not where the scaler is)
        casts = ctx.options.casts_model or bool(ctx.initialize_arguments)
        builds = analysis.optimizer_builds if casts else []
        if not ctx.options.casts_model:  # only the arguments: the builds that name a model
            builds = [build for build in builds if build.models] or builds
        if ctx.options.uses_master_weights:
            builds = _without_gradient_readers(ctx, builds, analysis)
        initialize_models(ctx, builds, analysis.kinds, ctx.scaler_home)
        linked = bool(analysis.links)  # a linked caller builds it and initializes there
        received = [s for s in analysis.training.steps if _received(s, ctx.facts)]
        if ctx.options.casts_model and not builds and received and not linked:
            optimizer = ctx.facts.one_line(received[0].optimizer)
            ctx.notes.append(Note(MODEL_NOT_INITIALIZED, received[0].call,
                                  f"`{optimizer}` is built in "
                                  f"another file: add `{ctx.scaler_expr}.initialize(model, "
                                  f"{optimizer})` by hand where it is (until then the model "
                                  "trains in float32)"))
    if ctx.options.casts_model and ctx.options.uses_master_weights:
        uncast = _gradient_readers(analysis)
        clip_master_weights(ctx, [clip for clip in analysis.training.clips
                                  if dotted(clip.optimizer) not in uncast])


_MODEL_CASTING_EXAMPLES = (
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
""",
        after="""\
import torch
from amprewrite_runtime import GradScaler, autocast

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = GradScaler("O2")
scaler.initialize(model, optimizer)
for x, y in loader:
    optimizer.zero_grad()
    with autocast():
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(scaler.master_params(optimizer), 1.0)
    scaler.step(optimizer)
    scaler.update()
""",
        codes=(MODEL_INITIALIZED, CLIPPING_ON_MASTER_WEIGHTS), options=Options(opt_level="O2"),
    ),
    Example(
        before="""\
import torch


def train(model, optimizer, loader):
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
""",
        after="""\
import torch
from amprewrite_runtime import GradScaler, autocast

scaler = GradScaler("O2")


def train(model, optimizer, loader):
    for x, y in loader:
        optimizer.zero_grad()
        with autocast():
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
        codes=(MODEL_NOT_INITIALIZED,), options=Options(opt_level="O2"),
    ),
)


RULE = rule("model-casting",
            (MODEL_INITIALIZED, MODEL_NOT_INITIALIZED, CLIPPING_ON_MASTER_WEIGHTS), _plan,
            examples=_MODEL_CASTING_EXAMPLES)
