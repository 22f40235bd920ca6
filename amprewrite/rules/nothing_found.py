"""Files with no training step, evaluation pass or custom Function found say so, with the
sites seen and left alone, if any."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amprewrite.analysis.ema_buffers import BUFFER_PRODUCT
from amprewrite.findings import NOTHING_TO_DO, Finding
from amprewrite.rules.checkpoint import (
    SCALER_NOT_NAMED,
    SCALER_NOT_RESTORED,
    unnamed_scaler_saves,
)
from amprewrite.rules.context import RuleContext
from amprewrite.rules.registry import Example, rule
from amprewrite.rules.shared_examples import MIXED_PRECISION_ALREADY
from amprewrite.rules.sites_left_alone import TRAINING_SITES

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis


def _nothing_found(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    ctx.notes.extend([*analysis.training.notes, *analysis.buffer_products])
    unnamed_scaler_saves(ctx, analysis.checkpoints)
    message = ("nothing amprewrite can rewrite safely; file left unchanged (see above)"
               if ctx.notes else
               "no training step or evaluation forward pass found; file left unchanged")
    ctx.file_findings.append(Finding(NOTHING_TO_DO, 1, 1, message))


_NOTHING_FOUND_EXAMPLES = (
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2)
x = torch.randn(8, 4, requires_grad=True)
model(x).sum().backward()
saliency = x.grad.abs()
""",
        after=None,
        codes=(NOTHING_TO_DO,),
    ),
    Example(
        before=MIXED_PRECISION_ALREADY,
        after=None,
        codes=(),
    ),
)


RULE = rule("nothing-found", (NOTHING_TO_DO,), _nothing_found, _NOTHING_FOUND_EXAMPLES,
            reports=(*TRAINING_SITES, BUFFER_PRODUCT, SCALER_NOT_NAMED, SCALER_NOT_RESTORED))
