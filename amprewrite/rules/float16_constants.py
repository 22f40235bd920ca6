"""Fill values float16 cannot hold become the tensor's own dtype limit, as transformers does."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amprewrite.analysis.float16_constants import (
    CONSTANT_OUT_OF_RANGE,
    FILL_NOT_FITTED,
    Float16Constants,
)
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, declare
from amprewrite.rules.context import RuleContext
from amprewrite.rules.edits import replaced_by
from amprewrite.rules.imports import torch_name
from amprewrite.rules.registry import Example, rule
from amprewrite.rules.shared_examples import MIXED_PRECISION_ALREADY
from amprewrite.transform import Replace

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis


FILL_FITTED = declare(
    "AMP141", CHANGE, "fill value float16 cannot hold replaced by the dtype's limit",
    "`x.masked_fill(mask, -1e9)` (also `masked_fill_`, `fill_`, `new_full`, `torch.full_like`, "
    "`torch.where`, `x[mask] = -1e9`) on a tensor that is or may be float16 under autocast "
    'raises on CUDA ("value cannot be converted to type c10::Half without overflow"); '
    "`torch.finfo(x.dtype).min` is right in every dtype, float32 included.",
    why=(
        "A fill value such as `-1e9` that float16 cannot hold fills a tensor that may "
        "be float16 under autocast."
    ),
)


def fit_fills_to_dtype(ctx: RuleContext, found: Float16Constants) -> None:
    """`scores.masked_fill(mask, -1e9)` -> `scores.masked_fill(mask, torch.finfo(scores.dtype)
    .min)`: correct in every dtype, where -1e9 raises on a float16 tensor."""
    ctx.notes.extend(found.notes)
    torch = torch_name(ctx.facts)
    for fill in found.fills:
        code = ctx.facts.module.code_for_node
        old = code(fill.value)
        if torch is None:
            ctx.notes.append(Note(FILL_NOT_FITTED, fill.value,
                                  f"`{old}` does not fit float16 (largest "
                                  "65504); fill with `torch.finfo(x.dtype).min` (torch is not "
                                  "imported by name here)"))
            continue
        limit = "min" if fill.negative else "max"
        new = f"{torch}.finfo({code(fill.tensor)}.dtype).{limit}"
        replacement = ctx.parse_expression(new)
        ctx.plan.replaces.append(Replace(fill.value, replaced_by(replacement)))
        where = "is float16" if fill.certain else "may be float16"
        ctx.notes.append(Note(FILL_FITTED, fill.value, f"`{old}` does not fit float16 (largest "
                              f"65504) and this tensor {where} under autocast: filled with "
                              f"`{new}` instead"))


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    if not analysis.escapes.stuck:
        fit_fills_to_dtype(ctx, analysis.float16_constants)


_FLOAT16_CONSTANTS_EXAMPLES = (
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    scores = model(x)
    scores = scores.masked_fill(y == 0, -1e9)
    loss = scores.logsumexp(-1).mean()
    loss.backward()
    optimizer.step()
""",
        after="""\
import torch
from amprewrite_runtime import GradScaler, autocast

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = GradScaler()
for x, y in loader:
    optimizer.zero_grad()
    with autocast():
        scores = model(x)
        scores = scores.masked_fill(y == 0, torch.finfo(scores.dtype).min)
        loss = scores.logsumexp(-1).mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        codes=(FILL_FITTED,),
    ),
    Example(
        before=MIXED_PRECISION_ALREADY,
        after=None,
        codes=(),
    ),
    Example(
        before="""\
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, q, k, mask):
        return (q @ k).masked_fill(mask, -1e9)


model = Attention()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for q, k, mask, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(q, k, mask), y)
    loss.backward()
    optimizer.step()
""",
        after="""\
import torch
from amprewrite_runtime import GradScaler, autocast
from torch import nn


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, q, k, mask):
        return (q @ k).masked_fill(mask, -1e9)


model = Attention()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = GradScaler()
for q, k, mask, y in loader:
    optimizer.zero_grad()
    with autocast():
        loss = torch.nn.functional.mse_loss(model(q, k, mask), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        codes=(FILL_NOT_FITTED,),
    ),
)


RULE = rule("float16-constants", (FILL_FITTED, FILL_NOT_FITTED, CONSTANT_OUT_OF_RANGE), _plan,
            examples=_FLOAT16_CONSTANTS_EXAMPLES)
