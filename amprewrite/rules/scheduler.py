"""Step an LR scheduler only when the optimizer step it follows was not skipped."""

from __future__ import annotations

import libcst as cst

from amprewrite.analysis.scaler_home import fresh_name
from amprewrite.analysis.schedulers import GuardedScheduler
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, declare
from amprewrite.rules.context import RuleContext
from amprewrite.transform import Replace

SCHEDULER_GUARDED = declare(
    "AMP111", CHANGE, "LR scheduler guarded against skipped steps",
    "A scheduler stepped in the same iteration as the optimizer only steps when the scaler did "
    "not skip the optimizer step (pytorch issue 55585).",
)


def guard_schedulers(ctx: RuleContext, schedulers: list[GuardedScheduler]) -> None:
    for scheduler in schedulers:
        if ctx.options.plain and not scheduler.after_update:
            continue  # the scale tells a skipped step only once `update()` has run
        if ctx.options.plain:
            # torch's GradScaler lowers its scale exactly when it skipped the step.
            name = ctx.scale_before_update.get(id(scheduler.after.call))
            if name is None:
                name = fresh_name(ctx.facts, ("scale_before_update",))
                ctx.scale_before_update[id(scheduler.after.call)] = name
            test = f"{ctx.scaler_expr}.get_scale() >= {name}"
        else:
            test = f"not {ctx.scaler_expr}.last_step_skipped"
        line = scheduler.site.statement
        condition = ctx.parse_expression(test)

        def build(node: cst.CSTNode, condition: cst.BaseExpression = condition) -> cst.CSTNode:
            assert isinstance(node, cst.SimpleStatementLine)
            body = cst.IndentedBlock(body=[node.with_changes(leading_lines=())])
            return cst.If(test=condition, body=body, leading_lines=node.leading_lines)

        ctx.plan.replaces.append(Replace(line, build))
        ctx.notes.append(Note(SCHEDULER_GUARDED, scheduler.site.call,
                              f"LR scheduler stepped only when "
                              f"the optimizer step was not skipped (`if {test}:`)"))
