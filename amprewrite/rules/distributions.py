"""Cast the arguments of distributions built under autocast to float32."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, declare
from amprewrite.rules.context import RuleContext
from amprewrite.rules.edits import as_float
from amprewrite.rules.registry import Example, rule
from amprewrite.rules.shared_examples import MIXED_PRECISION_ALREADY
from amprewrite.transform import Replace

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis


DISTRIBUTION_ARGUMENTS_CAST = declare(
    "AMP113", CHANGE, "distribution arguments cast to float32 under autocast",
    "`torch.distributions` checks its arguments (a simplex within 1e-6) and computes "
    "log-probabilities in the dtype it is given: under autocast its tensor arguments become "
    "`.float()`.",
    why="`torch.distributions` is given tensors computed under autocast.",
)


def float32_distributions(ctx: RuleContext, inputs: list[cst.BaseExpression]) -> None:
    for value in inputs:
        ctx.plan.replaces.append(Replace(value, as_float))
        text = ctx.facts.one_line(value)
        ctx.notes.append(Note(DISTRIBUTION_ARGUMENTS_CAST, value,
                              f"`{text}` cast to float32 for the distribution "
                              "built under autocast (its argument checks and log-probabilities "
                              "need float32)"))


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    if not analysis.escapes.stuck:
        float32_distributions(ctx, analysis.distribution_inputs)


_DISTRIBUTIONS_EXAMPLES = (
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    probs = torch.softmax(model(x), dim=-1)
    dist = torch.distributions.Categorical(probs=probs)
    loss = -dist.log_prob(y).mean()
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
        probs = torch.softmax(model(x), dim=-1)
        dist = torch.distributions.Categorical(probs=probs.float())
        loss = -dist.log_prob(y).mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        codes=(DISTRIBUTION_ARGUMENTS_CAST,),
    ),
    Example(
        before=MIXED_PRECISION_ALREADY,
        after=None,
        codes=(),
    ),
)


RULE = rule("distributions", (DISTRIBUTION_ARGUMENTS_CAST,), _plan,
            examples=_DISTRIBUTIONS_EXAMPLES)
