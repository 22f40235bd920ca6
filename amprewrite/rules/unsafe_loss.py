"""Compute losses that CUDA autocast refuses outside the region, on float32 inputs."""

from __future__ import annotations

import libcst as cst

from amprewrite.analysis.facts import CallSite
from amprewrite.analysis.training_step import Note
from amprewrite.analysis.unsafe_losses import UnsafeLoss
from amprewrite.rules.context import RuleContext
from amprewrite.rules.expressions import as_float
from amprewrite.transform import Replace


def float32_inputs(ctx: RuleContext, moved: list[UnsafeLoss], inline: list[CallSite]) -> None:
    for loss in moved:
        for call in loss.calls:
            ctx.plan.replaces.append(Replace(call.args[0].value, as_float))
        ctx.notes.append(Note("AMP130", loss.statement, "binary cross-entropy is unsafe under "
                              "autocast: computed after the autocast block on float32 inputs; "
                              "`BCEWithLogitsLoss` on logits is safe and more accurate"))
    for site in inline:
        ctx.notes.append(Note("AMP131", site.call, "binary cross-entropy computed inside "
                              "`.backward()` cannot run under autocast; the forward pass stays "
                              "float32 (switch to `BCEWithLogitsLoss` to use AMP here)"))
