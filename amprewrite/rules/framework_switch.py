"""Turn on a framework's own mixed precision: `Accelerator(mixed_precision=...)`,
`Trainer(precision=...)`, `Fabric(precision=...)`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis.frameworks import PrecisionSwitch
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, NOTE, SKIP, declare
from amprewrite.rules.context import RuleContext
from amprewrite.rules.edits import append_arguments, keyword, without
from amprewrite.rules.registry import Example, rule
from amprewrite.rules.revert import MIXED_PRECISION_REMOVED
from amprewrite.transform import Replace

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis

FRAMEWORK_SWITCHED_ON = declare(
    "AMP420", CHANGE, "framework mixed precision switched on",
    "Accelerate (`mixed_precision`), Lightning `Trainer`/`Fabric` (`precision`) own autocast and "
    "scaling: their switch is the whole rewrite.",
    why=(
        "The file builds an Accelerate `Accelerator` or a Lightning `Trainer`/`Fabric` "
        "without a precision setting."
    ),
)

FRAMEWORK_PRECISION_SET = declare(
    "AMP421", SKIP, "framework already sets its precision",
    "The `mixed_precision`/`precision` argument is already given: left as is.",
    why="The framework's `mixed_precision`/`precision` argument is already given.",
    example="accelerator = Accelerator(mixed_precision=\"no\")   # left as is",
)

FRAMEWORK_OWNS_PRECISION = declare(
    "AMP422", NOTE, "framework owns precision elsewhere",
    "This file uses a framework whose trainer is built in another file: set mixed precision "
    "there (amprewrite does when it rewrites that file).",
    why="The file uses a framework whose trainer is built in another file.",
    example="# model.py: a LightningModule; the Trainer is built in train.py",
)


def switch_off_mixed_precision(ctx: RuleContext, switches: list[PrecisionSwitch]) -> None:
    """O0: take out a mixed-precision switch amprewrite would have added."""
    for switch in switches:
        current = switch.current
        if current is None or ctx.facts.module.code_for_node(current) not in switch.values.values():
            continue
        argument = next(a for a in switch.call.args if a.value is current)
        ctx.plan.replaces.append(Replace(switch.call, without(switch.call, argument)))
        ctx.notes.append(Note(MIXED_PRECISION_REMOVED, switch.call,
                              f"`{switch.keyword}` removed: the "
                              "framework trains in FP32 again (O0)"))


def switch_on_mixed_precision(ctx: RuleContext, switches: list[PrecisionSwitch]) -> None:
    dtype = ctx.options.dtype or "float16"
    for switch in switches:
        framework = switch.framework.rsplit(".", 1)[-1]
        if switch.current is not None:
            current = ctx.facts.module.code_for_node(switch.current)
            ctx.notes.append(Note(FRAMEWORK_PRECISION_SET, switch.call,
                                  f"`{framework}` already sets "
                                  f"`{switch.keyword}={current}`; left unchanged"))
            continue
        value = switch.values[dtype]
        argument = keyword(switch.keyword, cst.parse_expression(value))
        ctx.plan.replaces.append(Replace(switch.call, append_arguments([argument])))
        ctx.notes.append(Note(FRAMEWORK_SWITCHED_ON, switch.call,
                              f"`{framework}(...)` owns precision: "
                              f"`{switch.keyword}={value}` added (no hand-made scaler)"))



def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    """A framework owns precision: switch it (add no autocast or scaler of our own)."""
    if ctx.options.opt_level == "O0":
        switch_off_mixed_precision(ctx, analysis.switches)
        return
    switch_on_mixed_precision(ctx, analysis.switches)
    if not analysis.switches:
        ctx.notes.append(Note(FRAMEWORK_OWNS_PRECISION, ctx.facts.module.body[0],
                              f"{analysis.framework} owns the training step's precision; set it "
                              "where the trainer is built"))


_FRAMEWORK_SWITCH_EXAMPLES = (
    Example(
        before="""\
from accelerate import Accelerator

accelerator = Accelerator()
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
""",
        after="""\
from accelerate import Accelerator

accelerator = Accelerator(mixed_precision="fp16")
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
""",
        codes=(FRAMEWORK_SWITCHED_ON,),
    ),
)


RULE = rule("framework-switch", (FRAMEWORK_SWITCHED_ON, FRAMEWORK_PRECISION_SET,
                                 FRAMEWORK_OWNS_PRECISION, MIXED_PRECISION_REMOVED), _plan,
            examples=_FRAMEWORK_SWITCH_EXAMPLES)
