"""`torch.cuda.amp` / `torch.cpu.amp` (deprecated since torch 2.4) to `torch.amp`, with the
device type spelled out and every argument kept."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis.deprecated_amp import DEPRECATED, DeprecatedAmp, DeprecatedUse
from amprewrite.analysis.names import dotted
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, declare
from amprewrite.rules.context import RuleContext
from amprewrite.rules.edits import keyword
from amprewrite.rules.registry import Example, rule
from amprewrite.rules.shared_examples import MIXED_PRECISION_ALREADY
from amprewrite.transform import Replace

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis


CUDA_AMP_MIGRATED = declare(
    "AMP401", CHANGE, "deprecated `torch.cuda.amp` / `torch.cpu.amp` migrated",
    "Deprecated since torch 2.4: now `torch.amp` with the device type spelled out; every "
    "argument is kept (autocast's positional ones by keyword).",
    why="The script uses `torch.cuda.amp` or `torch.cpu.amp`, deprecated since torch 2.4.",
)

# Positional parameters of the deprecated autocast constructors, which `torch.amp.autocast`
# (device_type, dtype, enabled, cache_enabled) orders differently: pass them by keyword.
_AUTOCAST_POSITIONALS = ("enabled", "dtype", "cache_enabled")


def migrate_cuda_amp(ctx: RuleContext, deprecated: DeprecatedAmp) -> None:
    for use in deprecated.uses:
        ctx.plan.replaces.append(Replace(use.node, _migrated(use)))
        old = f"torch.{use.device}.amp.{use.name}"
        device = f"`{use.device_code}`" if use.device_code else f'"{use.device}"'
        ctx.notes.append(Note(CUDA_AMP_MIGRATED, use.node,
                              f"`{old}` (deprecated since torch 2.4) migrated to "
                              f"`torch.amp.{use.name}` with device type {device}"))
    for statement in deprecated.imports:
        ctx.plan.replaces.append(Replace(statement, _import_from_torch_amp))


def _migrated(use: DeprecatedUse):  # type: ignore[no-untyped-def]
    device = (cst.parse_expression(use.device_code) if use.device_code
              else cst.SimpleString(f'"{use.device}"'))

    def build(node: cst.CSTNode) -> cst.CSTNode:
        if isinstance(node, cst.Decorator):  # bare `@torch.cuda.amp.custom_fwd`
            func = _to_torch_amp(node.decorator)
            call = cst.Call(func=func, args=[keyword("device_type", device)])
            return node.with_changes(decorator=call)
        assert isinstance(node, cst.Call)
        args = list(node.args)
        if use.partial:  # `partial(torch.cuda.amp.autocast, ...)`: its first argument
            target = args.pop(0)
            target = target.with_changes(value=_to_torch_amp(target.value))
        if use.name == "autocast":
            args = [keyword(_AUTOCAST_POSITIONALS[i], a.value) if a.keyword is None and not a.star
                    and i < len(_AUTOCAST_POSITIONALS) else a for i, a in enumerate(args)]
            args = [cst.Arg(device), *_commas(args)]
        elif use.name == "GradScaler":
            args = [cst.Arg(device), *_commas(args)]
        else:  # custom_fwd(cast_inputs=...) / custom_bwd(...)
            args = [keyword("device_type", device), *_commas(args)]
        if use.partial:
            return node.with_changes(args=_commas([target, *args]))
        return node.with_changes(func=_to_torch_amp(node.func), args=_commas(args))

    return build


def _to_torch_amp(func: cst.BaseExpression) -> cst.BaseExpression:
    """`torch.cuda.amp.autocast` -> `torch.amp.autocast`; an imported name stays as it is
    (its import is rewritten)."""
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Attribute) and isinstance(
            func.value.value, cst.Attribute) and func.value.attr.value == "amp":
        return func.with_changes(value=func.value.with_changes(value=func.value.value.value))
    return func


def _import_from_torch_amp(node: cst.CSTNode) -> cst.CSTNode:
    if isinstance(node, cst.ImportFrom):
        if dotted(node.module) in ("torch.cuda", "torch.cpu"):  # `from torch.cuda import amp`
            return node.with_changes(module=cst.Name("torch"))
        return node.with_changes(module=cst.parse_expression("torch.amp"))
    assert isinstance(node, cst.Import)
    torch_amp = cst.parse_expression("torch.amp")
    assert isinstance(torch_amp, cst.Attribute)
    names = [alias.with_changes(name=torch_amp) if dotted(alias.name) in DEPRECATED else alias
             for alias in node.names]
    return node.with_changes(names=names)



def _commas(args: list[cst.Arg]) -> list[cst.Arg]:
    """Comma-separate arguments (`a, b`), keeping a comma the source already had."""
    out = []
    for position, arg in enumerate(args):
        if position < len(args) - 1 and arg.comma is cst.MaybeSentinel.DEFAULT:
            arg = arg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        out.append(arg)
    return out


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    migrate_cuda_amp(ctx, analysis.deprecated)


_MIGRATE_TORCH_CUDA_AMP_EXAMPLES = (
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.cuda.amp.GradScaler()
for x, y in loader:
    optimizer.zero_grad()
    with torch.cuda.amp.autocast():
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        after="""\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    optimizer.zero_grad()
    with torch.amp.autocast("cuda"):
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        codes=(CUDA_AMP_MIGRATED,),
    ),
    Example(
        before=MIXED_PRECISION_ALREADY,
        after=None,
        codes=(),
    ),
)


RULE = rule("migrate-torch-cuda-amp", (CUDA_AMP_MIGRATED,), _plan,
            examples=_MIGRATE_TORCH_CUDA_AMP_EXAMPLES)
