"""Probability distributions built under autocast.

`torch.distributions` checks its arguments (`Categorical(probs)` needs a simplex to within
1e-6, `Normal(loc, scale)` a positive scale) and computes `log_prob`/`entropy` in the dtype it
is given: on bfloat16/float16 values the simplex check fails now and then, and log-probabilities
lose most of their digits. Inside an autocast region their tensor arguments are cast to float32.
"""

from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.names import walk
from amprewrite.analysis.training_step import Region

_NOT_TENSORS = (cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString,
                cst.FormattedString)


def distribution_inputs(regions: Iterable[Region], facts: ModuleFacts) -> list[cst.BaseExpression]:
    """Arguments of `torch.distributions` constructors called inside `regions` that may be
    low-precision tensors (not literals, not already `.float()`)."""
    found: list[cst.BaseExpression] = []
    for region in regions:
        for statement in region.statements:
            for node in walk(statement):
                if not isinstance(node, cst.Call):
                    continue
                name = facts.imports.resolve(node.func) or ""
                if not name.startswith("torch.distributions."):
                    continue
                found.extend(arg.value for arg in node.args
                             if arg.star == "" and not _plainly_float32(arg.value))
    return found


def _plainly_float32(value: cst.BaseExpression) -> bool:
    if isinstance(value, _NOT_TENSORS):
        return True
    return (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
            and value.func.attr.value in ("float", "double"))
