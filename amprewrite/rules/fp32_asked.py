"""At opt level O0 the file is FP32 training as it is: nothing to change, and it says so."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amprewrite.findings import NOTHING_TO_DO, Finding
from amprewrite.options import Options
from amprewrite.rules.context import RuleContext
from amprewrite.rules.registry import Example, rule
from amprewrite.rules.shared_examples import MIXED_PRECISION_ALREADY

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis


def _fp32_asked(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    ctx.file_findings.append(Finding(NOTHING_TO_DO, 1, 1,
                                     "opt level O0 is FP32 training: nothing to change"))


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
    Example(
        before=MIXED_PRECISION_ALREADY,
        after=None,
        codes=(),
    ),
)


RULE = rule("fp32-asked", (NOTHING_TO_DO,), _fp32_asked,
            examples=_FP32_ASKED_EXAMPLES)
