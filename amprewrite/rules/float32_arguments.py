"""Report calls kept out of autocast and cast the low-precision values passed to them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amprewrite.analysis.function_regions import OWN_BACKWARD_KEPT_OUT, FunctionRegions
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, declare
from amprewrite.rules.context import RuleContext
from amprewrite.rules.edits import as_float
from amprewrite.rules.registry import Example, rule
from amprewrite.rules.shared_examples import MIXED_PRECISION_ALREADY
from amprewrite.transform import Replace

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis


CAST_WHERE_LEAVING_AUTOCAST = declare(
    "AMP109", CHANGE, "low-precision value cast to float32 where it leaves autocast",
    "Passed to code that runs outside autocast (a function running its own backward) or that "
    "needs float32 (`torch.distributions` argument checks).",
    why=(
        "A value computed under autocast leaves the region for code that must see "
        "float32 (a function running its own backward, `torch.distributions` checks)."
    ),
)


def float32_arguments(ctx: RuleContext, placed: FunctionRegions) -> None:
    ctx.notes.extend(placed.notes)
    for value in placed.casts:
        ctx.plan.replaces.append(Replace(value, as_float))
        text = ctx.facts.one_line(value)
        ctx.notes.append(Note(CAST_WHERE_LEAVING_AUTOCAST, value,
                              f"`{text}` leaves autocast here: cast to float32 "
                              "for code that needs it"))


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    if not analysis.escapes.stuck:
        float32_arguments(ctx, analysis.function_regions)


_FLOAT32_ARGUMENTS_EXAMPLES = (
    Example(
        before="""\
import torch

generator = torch.nn.Linear(2, 4)
critic = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(generator.parameters(), lr=0.1)


def attack(model, x):
    x = x.detach().requires_grad_(True)
    model(x).sum().backward()
    return x + 0.1 * x.grad.sign()


for z in loader:
    fake = generator(z)
    loss = critic(attack(critic, fake)).mean() + critic(fake).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
""",
        after="""\
import torch
from amprewrite_runtime import GradScaler, autocast

generator = torch.nn.Linear(2, 4)
critic = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(generator.parameters(), lr=0.1)
scaler = GradScaler()


def attack(model, x):
    x = x.detach().requires_grad_(True)
    model(x).sum().backward()
    return x + 0.1 * x.grad.sign()


for z in loader:
    with autocast():
        fake = generator(z)
    loss = (
        critic(attack(critic, fake.float()).float()).mean()
        + critic(fake.float()).mean()
    )
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        codes=(CAST_WHERE_LEAVING_AUTOCAST,),
    ),
    Example(
        before=MIXED_PRECISION_ALREADY,
        after=None,
        codes=(),
    ),
)


RULE = rule("float32-arguments", (CAST_WHERE_LEAVING_AUTOCAST, OWN_BACKWARD_KEPT_OUT), _plan,
            examples=_FLOAT32_ARGUMENTS_EXAMPLES)
