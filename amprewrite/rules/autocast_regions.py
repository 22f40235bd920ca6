"""Autocast around each region the analysis placed: forward passes and losses of training,
of shared helpers, of producers of stored outputs, and of evaluation; losses CUDA autocast
refuses are computed after the region on float32 inputs."""

from __future__ import annotations

from amprewrite.analysis import ModuleAnalysis
from amprewrite.analysis.unsafe_losses import SplitRegions
from amprewrite.catalog import Code
from amprewrite.rules.autocast import (
    EVALUATION_WRAPPED,
    FORWARD_WRAPPED,
    PRODUCER_WRAPPED,
    SHARED_HELPER_WRAPPED,
    wrap_regions,
)
from amprewrite.rules.context import RuleContext
from amprewrite.rules.registry import Example, rule
from amprewrite.rules.sigmoid_saturation import BCE_MOVED_OUT, float32_inputs


def splits(analysis: ModuleAnalysis) -> list[SplitRegions]:
    """Every kind of region, in the order they are wrapped."""
    return [analysis.training_regions, analysis.evaluation_regions, analysis.helper_regions,
            analysis.producer_regions]


def _kinds(analysis: ModuleAnalysis) -> list[tuple[SplitRegions, Code, str]]:
    return [
        (analysis.training_regions, FORWARD_WRAPPED, "forward pass and loss"),
        (analysis.evaluation_regions, EVALUATION_WRAPPED, "evaluation forward pass"),
        (analysis.helper_regions, SHARED_HELPER_WRAPPED,
         "forward pass and loss of a helper that training shares with other callers"),
        (analysis.producer_regions, PRODUCER_WRAPPED,
         "forward pass whose outputs a later loss reads"),
    ]


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    if analysis.escapes.stuck:  # autocast is left out of the file (AMP133)
        return
    for split, code, what in _kinds(analysis):
        wrap_regions(ctx, split.regions, code, what)
        float32_inputs(ctx, split.moved_out)


_AUTOCAST_REGIONS_EXAMPLES = (
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2)
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

model = torch.nn.Linear(4, 2)
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
        codes=(FORWARD_WRAPPED, BCE_MOVED_OUT),
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
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
with torch.no_grad(), torch.autocast("cuda"):
    print(model(x_test))
""",
        after=None,
        codes=(),
    ),
)


RULE = rule(
    "autocast-regions",
    (FORWARD_WRAPPED, EVALUATION_WRAPPED, SHARED_HELPER_WRAPPED, PRODUCER_WRAPPED, BCE_MOVED_OUT),
    _plan,
    examples=_AUTOCAST_REGIONS_EXAMPLES,
)
