"""`--dtype float8`: the model an optimizer trains is converted where it is built.

`model = float8_training(model)` goes right after the statement building the model, before
`torch.compile`, DDP or `fully_shard` wrap it (`fsdp=True` where `fully_shard` shards it:
float8 all-gather). The runtime converts only where float8 is chosen at run time (a GPU with
float8 tensor cores and torchao, or `AMPREWRITE_DTYPE=float8`) and keeps the layers float8
cannot serve in bfloat16; the rest of the rewrite is bfloat16's. The conversion keeps the
model's `weight` and `bias` parameters, so an optimizer built before it needs no change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis.facts import Binding, ModuleFacts, Statement
from amprewrite.analysis.names import dotted
from amprewrite.analysis.optimizer_builds import OptimizerBuild
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, SKIP, declare
from amprewrite.options import Options
from amprewrite.rules.context import RuleContext
from amprewrite.rules.registry import Example, rule
from amprewrite.transform import Insert

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis

FLOAT8_CONVERSION = declare(
    "AMP180", CHANGE, "model converted to float8 training where it is built",
    "`model = float8_training(model)` right after the model is built, before any compile, DDP "
    "or FSDP wrap: where float8 is chosen at run time (compute capability 8.9 or newer and "
    "torchao, or `AMPREWRITE_DTYPE=float8`), torchao's `Float8Linear` replaces the linear "
    "layers float8 GEMMs can take (the output head and layers with dimensions not divisible "
    "by 16 stay bfloat16); elsewhere the model trains in bfloat16. `fsdp=True` where "
    "`fully_shard` shards it: float8 all-gather, scales precomputed after each step.",
    why="`--dtype float8`, and the model the optimizer's parameters come from is built here.",
)

FLOAT8_NOT_CONVERTED = declare(
    "AMP280", SKIP, "model left in bfloat16: no float8 conversion",
    "The optimizer's model is unknown, comes from the caller or another function, is built "
    "inside a wrapper (`DDP(Net())`, `torch.compile(Net())`), or is parallelized with "
    "tensor parallelism (which needs torchao's `Float8ColwiseParallel`/`Float8RowwiseParallel` "
    "plans): it trains in bfloat16. Add `model = float8_training(model)` by hand where the "
    "model is built, before it is wrapped.",
    why="`--dtype float8`, and the model an optimizer trains cannot be converted here.",
)

_WRAPPERS = frozenset({"compile", "DistributedDataParallel", "DataParallel",
                       "FullyShardedDataParallel"})
_TENSOR_PARALLEL = "torch.distributed.tensor.parallel.parallelize_module"
_BY_HAND = (": it trains in bfloat16; add `model = float8_training(model)` by hand where it is "
            "built, before any wrapping")


@dataclass(frozen=True)
class Conversion:
    """Where a model is built and converted: its key, the statement binding it, whether
    `fully_shard` shards it."""

    model: str
    built: Statement
    fsdp: bool


@dataclass(frozen=True)
class Float8Plan:
    conversions: list[Conversion]
    refused: list[tuple[cst.CSTNode, str]]  # the site and why


def float8_plan(analysis: ModuleAnalysis, options: Options) -> Float8Plan:
    """The conversions `--dtype float8` makes in a module that trains, and the models it
    cannot convert (the site, and why with what to do)."""
    plan = Float8Plan([], [])
    if options.dtype != "float8" or not analysis.training.found:
        return plan
    facts = analysis.facts
    seen: set[tuple[cst.FunctionDef | None, str]] = set()
    for build in analysis.optimizer_builds:
        statement = build.binding.statement
        if not build.models:
            plan.refused.append((statement, f"cannot tell which model `{build.optimizer}` "
                                            f"trains{_BY_HAND}"))
        for model in build.models:
            if (build.binding.function, model) in seen:
                continue
            seen.add((build.binding.function, model))
            built, name = _built(facts, build, model)
            if built is None:
                plan.refused.append((statement, name + _BY_HAND))
                continue
            parallel = _tensor_parallel(facts, built, name)
            if parallel is not None:
                plan.refused.append((parallel, (
                    f"`{name}` is tensor-parallel: it trains in bfloat16; for float8, convert "
                    f"it (`{name} = float8_training({name})`) before `parallelize_module` and "
                    "use torchao's `Float8ColwiseParallel`/`Float8RowwiseParallel` in its plan")))
                continue
            if any(c.built is built.statement and c.model == name for c in plan.conversions):
                continue  # two optimizers, or one of a wrap and one of the model
            fsdp = any(wrap.api == "fully_shard" and wrap.site.function is built.function
                       for wrap in analysis.sharding_wraps)
            plan.conversions.append(Conversion(name, built.statement, fsdp))
    built_here: set[str | None] = {build.optimizer for build in analysis.optimizer_builds}
    for step in analysis.training.steps:
        if step.key not in built_here:
            built_here.add(step.key)
            plan.refused.append((step.call, f"`{facts.one_line(step.optimizer)}` is built "
                                            f"elsewhere, with its model{_BY_HAND}"))
    return plan


def _tensor_parallel(facts: ModuleFacts, built: Binding, model: str) -> cst.Call | None:
    """`parallelize_module(model, ...)` in the function that builds `model`."""
    return next((site.call for site in facts.calls
                 if site.function is built.function and site.call.args
                 and facts.imports.resolve(site.call.func) == _TENSOR_PARALLEL
                 and dotted(site.call.args[0].value) == model), None)


def _built(
    facts: ModuleFacts, build: OptimizerBuild, model: str
) -> tuple[Binding | None, str]:
    """The binding that builds `model` before `build` in the same function, past the wraps
    of a named model (`model = torch.compile(model)`, `ddp_model = DDP(model)`: `model`'s);
    else None and why there is none. `model` comes back as the name the binding builds."""
    if model == "self":
        return None, f"`{build.optimizer}` trains `self`, a model its caller builds"
    bindings = facts.bindings[:facts.bindings.index(build.binding)]
    for binding in reversed(bindings):
        if model not in binding.keys or binding.function is not build.binding.function:
            continue
        value = _value_of(binding, model)
        wrapper = _wrapper(facts, value)
        if wrapper is None:
            return binding, model
        arguments = value.args if isinstance(value, cst.Call) else ()
        wrapped = dotted(arguments[0].value) if arguments else None
        if wrapped is None:
            return None, f"`{model}` is built inside `{wrapper}(...)`"
        model = wrapped
    function = build.binding.function
    if function is not None and model.split(".")[0] in facts.parameters(function)[0]:
        return None, f"`{model}` is a parameter of `{function.name.value}`"
    return None, f"`{model}` is not built where `{build.optimizer}` is"


def _value_of(binding: Binding, key: str) -> cst.BaseExpression:
    """What `binding` assigns to `key`: its element of `a, b = x, y`, else the whole value."""
    value = binding.value
    if len(binding.keys) > 1 and isinstance(value, cst.Tuple | cst.List) and len(
            value.elements) == len(binding.keys):
        return value.elements[binding.keys.index(key)].value
    return value


def _wrapper(facts: ModuleFacts, value: cst.BaseExpression) -> str | None:
    """The wrapper `value` calls (`torch.compile`, DDP, FSDP) as the script spells it, else
    None."""
    if not isinstance(value, cst.Call):
        return None
    name = facts.imports.resolve(value.func) or facts.module.code_for_node(value.func)
    return (facts.module.code_for_node(value.func)
            if name.rsplit(".", 1)[-1] in _WRAPPERS else None)


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    assert ctx.style is not None
    plan = float8_plan(analysis, ctx.options)
    for conversion in plan.conversions:
        arguments = f"{conversion.model}, fsdp=True" if conversion.fsdp else conversion.model
        code = f"{conversion.model} = {ctx.style.float8_training}({arguments})"
        block, index = ctx.facts.position(conversion.built)
        ctx.plan.inserts.append(Insert(block, index + 1, [ctx.parse_statement(code)]))
        ctx.notes.append(Note(FLOAT8_CONVERSION, conversion.built,
                              f"`{code}` added right after the model is built: float8 "
                              "linear layers where the GPU has them, bfloat16 elsewhere"))
    for site, why in plan.refused:
        ctx.notes.append(Note(FLOAT8_NOT_CONVERTED, site, why))


_FLOAT8_EXAMPLES = (
    Example(
        before="""\
import torch
from torch.distributed.fsdp import fully_shard

model = Transformer()
for layer in model.layers:
    fully_shard(layer)
fully_shard(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
""",
        after="""\
import torch
from amprewrite_runtime import GradScaler, autocast, float8_training
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

model = Transformer()
model = float8_training(model, fsdp=True)
mp_policy = MixedPrecisionPolicy(
    param_dtype=torch.bfloat16, reduce_dtype=torch.float32
)
for layer in model.layers:
    fully_shard(layer, mp_policy=mp_policy)
fully_shard(model, mp_policy=mp_policy)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
scaler = GradScaler(dtype="bfloat16", sharded=True)
for x, y in loader:
    optimizer.zero_grad()
    with autocast(dtype="bfloat16"):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        codes=(FLOAT8_CONVERSION,), options=Options(dtype="float8"),
    ),
    Example(
        before="""\
import torch


def train(model, loader):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
""",
        after="""\
import torch
from amprewrite_runtime import GradScaler, autocast


def train(model, loader):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = GradScaler(dtype="bfloat16")
    for x, y in loader:
        optimizer.zero_grad()
        with autocast(dtype="bfloat16"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
        codes=(FLOAT8_NOT_CONVERTED,), options=Options(dtype="float8"),
    ),
)

RULE = rule("float8", (FLOAT8_CONVERSION, FLOAT8_NOT_CONVERTED), _plan,
            examples=_FLOAT8_EXAMPLES)
