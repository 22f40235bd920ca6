"""Cast the arguments of distributions built under autocast to float32."""

from __future__ import annotations

import libcst as cst

from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, declare
from amprewrite.rules.context import RuleContext
from amprewrite.rules.expressions import as_float
from amprewrite.transform import Replace

DISTRIBUTION_ARGUMENTS_CAST = declare(
    "AMP113", CHANGE, "distribution arguments cast to float32 under autocast",
    "`torch.distributions` checks its arguments (a simplex within 1e-6) and computes "
    "log-probabilities in the dtype it is given: under autocast its tensor arguments become "
    "`.float()`.",
)


def float32_distributions(ctx: RuleContext, inputs: list[cst.BaseExpression]) -> None:
    for value in inputs:
        ctx.plan.replaces.append(Replace(value, as_float))
        text = " ".join(ctx.facts.module.code_for_node(value).split())
        ctx.notes.append(Note(DISTRIBUTION_ARGUMENTS_CAST, value,
                              f"`{text}` cast to float32 for the distribution "
                              "built under autocast (its argument checks and log-probabilities "
                              "need float32)"))
