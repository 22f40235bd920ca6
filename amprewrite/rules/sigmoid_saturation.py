"""Compute losses that CUDA autocast refuses outside the region, on float32 inputs; a forward
written inline in the loss's input stays under autocast, on a line of its own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis.facts import Block
from amprewrite.analysis.names import bound_keys, dotted, iter_keys
from amprewrite.analysis.sigmoid_outputs import SaturatingInput
from amprewrite.analysis.training_step import Note
from amprewrite.analysis.unsafe_losses import UnsafeLoss
from amprewrite.catalog import CHANGE, SKIP, declare
from amprewrite.rules.autocast import FORWARD_WRAPPED
from amprewrite.rules.context import RuleContext
from amprewrite.rules.edits import as_float, one_per_line, too_long
from amprewrite.rules.registry import Example, rule
from amprewrite.transform import Replace, Wrap

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis


BCE_MOVED_OUT = declare(
    "AMP130", CHANGE, "binary cross-entropy moved out of autocast",
    "`nn.BCELoss`/`F.binary_cross_entropy` raise under CUDA autocast; they now run after the "
    "autocast block on float32 inputs. Prefer `BCEWithLogitsLoss`.",
    why=(
        "`nn.BCELoss` or `F.binary_cross_entropy` would run inside an autocast region, "
        "where CUDA autocast raises."
    ),
)

SIGMOID_FEEDS_BCE = declare(
    "AMP132", SKIP, "sigmoid output fed to binary cross-entropy",
    "Probabilities from a sigmoid computed in bfloat16/float16 round to 1.0 and the loss jumps; "
    "drop the model's final sigmoid and use `BCEWithLogitsLoss`.",
    why=(
        "Probabilities from a sigmoid computed under autocast feed binary "
        "cross-entropy, and cannot be made float32 where they are produced."
    ),
    example=(
        "probs = torch.sigmoid(model(x))\n"
        "loss = F.binary_cross_entropy(probs, y)\n"
        "# use logits and BCEWithLogitsLoss"
    ),
)

SIGMOID_INPUT_CAST = declare(
    "AMP134", CHANGE, "sigmoid input cast to float32 for binary cross-entropy",
    "A model's forward ends in a sigmoid (`torch.sigmoid(h)`, an `nn.Sigmoid()` layer called on "
    "its own) whose probabilities feed binary cross-entropy: its input becomes `.float()`, so "
    "probabilities near 1 keep their precision instead of rounding to 1.0 in bfloat16/float16. A "
    "sigmoid that is the last layer of an `nn.Sequential` is reported instead (AMP132).",
    why="A model's forward ends in a sigmoid whose probabilities feed binary cross-entropy.",
)


SIGMOID_LAYER_FLOAT32 = declare(
    "AMP135", CHANGE, "final sigmoid layer computed in float32 for binary cross-entropy",
    "The model's last layer, an `nn.Sigmoid()` in an `nn.Sequential`, now runs in float32 "
    "(`float32_sigmoid(nn.Sigmoid())`, no parameters: the state dict is unchanged), so "
    "probabilities near 1 keep their precision. Logits with `nn.BCEWithLogitsLoss` are still "
    "the better fix.",
    why="An `nn.Sequential` model ending in `nn.Sigmoid()` feeds binary cross-entropy: under "
        "autocast its bfloat16/float16 probabilities round to 1.0 (a DCGAN's loss 2.5x FP32's "
        "by its third step).",
)


@dataclass
class _Group:
    """Consecutive loss statements whose forwards share one autocast block before them."""

    block: Block
    last: int  # index of the group's last loss statement
    wrap: int  # position of the autocast block in the plan
    bound: set[str]  # keys the group's statements bind


def float32_inputs(ctx: RuleContext, moved: list[UnsafeLoss]) -> None:
    groups: dict[int, _Group] = {}
    for loss in moved:
        kept = _keep_forwards_in_region(ctx, loss, groups)
        for call in loss.calls:
            ctx.plan.replaces.append(Replace(call.args[0].value, as_float))
        message = ("binary cross-entropy is unsafe under autocast: computed after the autocast "
                   "block on float32 inputs")
        if kept:
            message += f" (its forward pass stays under autocast as `{'`, `'.join(kept)}`)"
        ctx.notes.append(Note(BCE_MOVED_OUT, loss.statement, message + "; `BCEWithLogitsLoss` on "
                              "logits is safe and more accurate"))


def report_saturation(ctx: RuleContext, inputs: list[SaturatingInput]) -> None:
    """Cast a sigmoid's input to float32 where that is one edit; report the others."""
    cast: set[int] = set()
    for found in inputs:
        sequential, wrapper = found.sequential, ctx.style.float32_sigmoid if ctx.style else ""
        if found.cast is None and sequential is not None and wrapper:
            if id(sequential) not in cast:
                cast.add(id(sequential))
                build = _last_layer_in(wrapper)
                if too_long(ctx.facts, sequential, [cst.Name(wrapper)], ctx.line_limit):
                    build = one_per_line(build, ctx.facts.module.default_indent)
                ctx.plan.replaces.append(Replace(sequential, build))
                ctx.notes.append(Note(SIGMOID_LAYER_FLOAT32, sequential.args[-1].value, (
                    f"final `nn.Sigmoid()` of {found.source.split(',')[0]} computed in float32 "
                    f"(`{wrapper}(...)`): its probabilities feed binary cross-entropy, and in "
                    "bfloat16/float16 they round to 1.0 and the loss saturates")))
        elif found.cast is None:
            ctx.notes.append(Note(SIGMOID_FEEDS_BCE, found.call,
                                  f"binary cross-entropy on probabilities "
                                  f"from {found.source}: computed in bfloat16/float16 under "
                                  "autocast they round to 1.0 and the loss saturates; "
                                  f"{found.advice}"))
        elif id(found.cast) not in cast:
            cast.add(id(found.cast))
            ctx.plan.replaces.append(Replace(found.cast, as_float))
            ctx.notes.append(Note(SIGMOID_INPUT_CAST, found.cast,
                                  "sigmoid input cast to float32 for "
                                  "binary cross-entropy: bfloat16/float16 probabilities round "
                                  "to 1.0 near 1 and the loss saturates"))


def _last_layer_in(wrapper: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """`nn.Sequential(..., nn.Sigmoid())` -> `nn.Sequential(..., wrapper(nn.Sigmoid()))`."""

    def build(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call)
        last = node.args[-1]
        wrapped = cst.Call(cst.Name(wrapper), [cst.Arg(last.value)])
        return node.with_changes(args=[*node.args[:-1], last.with_changes(value=wrapped)])

    return build


def _keep_forwards_in_region(
    ctx: RuleContext, loss: UnsafeLoss, groups: dict[int, _Group]
) -> list[str]:
    """`bce(disc(fake), valid)` -> `disc_out = disc(fake)` at the end of the autocast block
    before the statement (a new block when none ends there; the block of the loss statement
    just before, when that one had forwards too), and `bce(disc_out, valid)`."""
    if not loss.forwards:
        return []
    lines, names = [], []
    for forward in loss.forwards:
        name = _fresh(ctx, forward)
        names.append(name)
        lines.append(cst.SimpleStatementLine([cst.Assign(
            targets=[cst.AssignTarget(cst.Name(name))],
            value=forward.with_changes(lpar=[], rpar=[]))]))
        ctx.plan.replaces.append(Replace(forward, lambda _, name=name: cst.Name(name)))
    bound = bound_keys(loss.statement)
    group = groups.get(id(loss.block))
    reads = {key for forward in loss.forwards for key in iter_keys(forward)}
    if group is not None and group.last == loss.index - 1 and not reads & group.bound:
        position = group.wrap
    else:
        position = next((p for p, w in enumerate(ctx.plan.wraps)
                         if w.block is loss.block and w.end == loss.index - 1), None)
        group = None
    if position is None:
        position = len(ctx.plan.wraps)
        item = ctx.parse_expression(ctx.autocast_call)
        ctx.plan.wraps.append(Wrap(loss.block, loss.index, loss.index - 1, item, []))
        ctx.notes.append(Note(FORWARD_WRAPPED, loss.statement, "forward pass wrapped in "
                              f"`with {ctx.autocast_call}:`"))
    wrap = ctx.plan.wraps[position]
    ctx.plan.wraps[position] = Wrap(wrap.block, wrap.start, wrap.end, wrap.item,
                                    [*wrap.tail, *lines])
    groups[id(loss.block)] = _Group(loss.block, loss.index, position,
                                    bound | (group.bound if group else set()))
    return names


def _fresh(ctx: RuleContext, forward: cst.BaseExpression) -> str:
    """`disc(fake)` -> `disc_out` (`disc_out_2`, ... when taken, in the file or this plan)."""
    model = next((dotted(node.func) for node in _calls(forward) if dotted(node.func)), None)
    base = f"{(model or 'model').rsplit('.', 1)[-1]}_out"
    return ctx.names.fresh((base,))


def _calls(node: cst.CSTNode) -> list[cst.Call]:
    """Calls in `node`, outermost receiver first (`disc(x).view(-1)` -> `disc(x)` last)."""
    found: list[cst.Call] = []
    while True:
        if isinstance(node, cst.Call):
            found.append(node)
            node = node.func
        elif isinstance(node, cst.Attribute | cst.Subscript):
            node = node.value
        else:
            return found[::-1]


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    report_saturation(ctx, analysis.saturating)


_SIGMOID_SATURATION_EXAMPLES = (
    Example(
        before="""\
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 1)

    def forward(self, x):
        return torch.sigmoid(self.fc(x))


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = torch.nn.BCELoss()
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
""",
        after="""\
import torch
from amprewrite_runtime import GradScaler, autocast


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 1)

    def forward(self, x):
        return torch.sigmoid(self.fc(x).float())


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = GradScaler()
criterion = torch.nn.BCELoss()
for x, y in loader:
    optimizer.zero_grad()
    with autocast():
        model_out = model(x)
    loss = criterion(model_out.float(), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        codes=(SIGMOID_INPUT_CAST,),
    ),
    Example(
        before="""\
import torch

model = torch.nn.Sequential(torch.nn.Linear(4, 1), torch.nn.Sigmoid())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = torch.nn.BCELoss()
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
""",
        after="""\
import torch
from amprewrite_runtime import GradScaler, autocast, float32_sigmoid

model = torch.nn.Sequential(
    torch.nn.Linear(4, 1),
    float32_sigmoid(torch.nn.Sigmoid()),
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = GradScaler()
criterion = torch.nn.BCELoss()
for x, y in loader:
    optimizer.zero_grad()
    with autocast():
        model_out = model(x)
    loss = criterion(model_out.float(), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        codes=(SIGMOID_LAYER_FLOAT32,),
    ),
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.binary_cross_entropy(torch.sigmoid(model(x)), y)
    loss.backward()
    optimizer.step()
""",
        after="""\
import torch
from amprewrite_runtime import GradScaler, autocast

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = GradScaler()
for x, y in loader:
    optimizer.zero_grad()
    with autocast():
        sigmoid_out = torch.sigmoid(model(x))
    loss = torch.nn.functional.binary_cross_entropy(sigmoid_out.float(), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        codes=(SIGMOID_FEEDS_BCE,),
    ),
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler()
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda"):
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        after=None,
        codes=(),
    ),
)


RULE = rule("sigmoid-saturation", (SIGMOID_FEEDS_BCE, SIGMOID_INPUT_CAST, SIGMOID_LAYER_FLOAT32),
            _plan,
            examples=_SIGMOID_SATURATION_EXAMPLES)
