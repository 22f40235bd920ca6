"""A module that already uses AMP: report its AMP mistakes and fix the fixable ones (a
backward left unscaled, a step bypassing the scaler, a missing `update()` or `unscale_`, a
checkpoint without the scaler's state) with the script's own scaler."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from amprewrite.analysis.hazards import MANUAL_CAST
from amprewrite.analysis.lint import (
    BACKWARD_IN_AUTOCAST,
    BCE_IN_AUTOCAST,
    CHECKPOINT_WITHOUT_SCALER,
    CLIPPING_WITHOUT_UNSCALE,
    FLOAT16_WITHOUT_SCALER,
    FP32_PATH_KEPT,
    HALF_CAST_NEXT_TO_SCALER,
    STEP_BYPASSES_SCALER,
    STEP_WITHOUT_UPDATE,
    UNSCALED_BACKWARD,
)
from amprewrite.findings import ALREADY_MIXED_PRECISION, Finding
from amprewrite.rules.checkpoint import checkpoint_scaler
from amprewrite.rules.context import RuleContext
from amprewrite.rules.loss_scaling import add_updates, route_steps, scale_backwards
from amprewrite.rules.registry import Example, rule
from amprewrite.rules.shared_examples import MIXED_PRECISION_ALREADY
from amprewrite.rules.unscaling import unscale_before_use

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    found = analysis.amp_mistakes
    reported = ctx.notes
    ctx.notes = []  # the fixes' own account is not reported: the mistakes are
    applying = [found, found.unsafe] if ctx.options.unsafe_fixes else [found]
    if found.scaler is not None:
        for fixes in applying:
            if fixes is None:
                continue
            scale_backwards(ctx, fixes.unscaled_backwards)
            route_steps(ctx, fixes.bypassing_steps)
            add_updates(ctx, fixes.missing_update_after)
            unscale_before_use(ctx, fixes.missing_unscales)
            if fixes.checkpoints is not None:
                checkpoint_scaler(ctx, fixes.checkpoints)
    unsafe = {id(note) for note in found.unsafe_notes}
    tail = "unsafe fix applied" if ctx.options.unsafe_fixes else (
        "unsafe fix, not applied: the protocol check sees no path to this site "
        "(--unsafe-fixes applies it)")
    ctx.notes = [*reported, *(dataclasses.replace(note, message=f"{note.message} ({tail})")
                              if id(note) in unsafe else note for note in found.notes)]
    if not ctx.plan:
        ctx.file_findings.append(Finding(
            ALREADY_MIXED_PRECISION, 1, 1,
            f"file already uses mixed precision (`{analysis.existing_amp}`); left unchanged"))


_LINT_FIXES_EXAMPLES = (
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
""",
        after=None,
        codes=(FLOAT16_WITHOUT_SCALER, ALREADY_MIXED_PRECISION),
    ),
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda"):
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
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
    with torch.autocast("cuda"):
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
""",
        codes=(CLIPPING_WITHOUT_UNSCALE,),
    ),
    Example(
        before=MIXED_PRECISION_ALREADY,
        after=None,
        codes=(ALREADY_MIXED_PRECISION,),
    ),
)


RULE = rule(
    "lint-fixes",
    (STEP_BYPASSES_SCALER, STEP_WITHOUT_UPDATE, CLIPPING_WITHOUT_UNSCALE, BACKWARD_IN_AUTOCAST,
     CHECKPOINT_WITHOUT_SCALER, BCE_IN_AUTOCAST, HALF_CAST_NEXT_TO_SCALER, UNSCALED_BACKWARD,
     FLOAT16_WITHOUT_SCALER, FP32_PATH_KEPT, ALREADY_MIXED_PRECISION),
    _plan,
    examples=_LINT_FIXES_EXAMPLES,
    reports=(MANUAL_CAST,),
)
