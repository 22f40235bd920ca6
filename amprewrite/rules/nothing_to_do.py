"""Files with nothing to rewrite say why: FP32 asked for, or no training step, evaluation
pass or custom Function found (with the sites seen and left alone, if any)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amprewrite.analysis.ema_buffers import BUFFER_PRODUCT
from amprewrite.findings import NOTHING_TO_DO, Finding
from amprewrite.options import Options
from amprewrite.rules.checkpoint import SCALER_NOT_NAMED, unnamed_scaler_saves
from amprewrite.rules.context import RuleContext
from amprewrite.rules.registry import Example, rule

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis


def _fp32_asked(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    ctx.file_findings.append(Finding(NOTHING_TO_DO, 1, 1,
                                     "opt level O0 is FP32 training: nothing to change"))


def _nothing_found(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    ctx.notes.extend([*analysis.training.notes, *analysis.buffer_products])
    unnamed_scaler_saves(ctx, analysis.checkpoints)
    message = ("nothing amprewrite can rewrite safely; file left unchanged (see above)"
               if ctx.notes else
               "no training step or evaluation forward pass found; file left unchanged")
    ctx.file_findings.append(Finding(NOTHING_TO_DO, 1, 1, message))


_FP32_ASKED_EXAMPLES = (
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
""",
        after=None,
        codes=(NOTHING_TO_DO,), options=Options(opt_level="O0"),
    ),
)


FP32_ASKED = rule("fp32-asked", (NOTHING_TO_DO,), _fp32_asked,
            examples=_FP32_ASKED_EXAMPLES)
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
)


NOTHING_FOUND = rule("nothing-found", (NOTHING_TO_DO, SCALER_NOT_NAMED, BUFFER_PRODUCT),
                     _nothing_found,
                     _NOTHING_FOUND_EXAMPLES)
