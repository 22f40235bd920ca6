"""Probability distributions built under autocast.

`torch.distributions` checks its arguments (`Categorical(probs)` needs a simplex to within
1e-6, `Normal(loc, scale)` a positive scale) and computes `log_prob`/`entropy` in the dtype it
is given: on bfloat16/float16 values the simplex check fails now and then, log-probabilities
lose most of their digits, and a float16 scale's square underflows (`clamp(sigma, 1e-6)`: the
log-probability is -inf). Inside an autocast region, and in the code it runs, their tensor
arguments are cast to float32.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.float16_constants import functions_run
from amprewrite.analysis.kinds import KindTable
from amprewrite.analysis.names import walk
from amprewrite.analysis.training_step import Region

_NOT_TENSORS = (cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString,
                cst.FormattedString)


def distribution_inputs(
    regions: Iterable[Region], facts: ModuleFacts, kinds: KindTable,
    cast: Collection[cst.BaseExpression] = (),
) -> list[cst.BaseExpression]:
    """Arguments of `torch.distributions` constructors called inside `regions`, or in the
    functions and model methods that run under them (`functions_run`: an actor's
    `sample_normal` building `Normal(mu, sigma)`), that may be low-precision tensors (not
    literals, not already `.float()`, not among `cast`, the values cast already)."""
    regions = list(regions)
    roots: list[cst.CSTNode] = [*(s for region in regions for s in region.statements),
                                *(f.body for f in functions_run(regions, facts, kinds))]
    skip = {id(value) for value in cast}
    found: list[cst.BaseExpression] = []
    for root in roots:
        for node in walk(root):
            if not isinstance(node, cst.Call):
                continue
            if not _constructs_distribution(node, facts):
                continue
            for arg in node.args:
                if (arg.star == "" and not _plainly_float32(arg.value)
                        and not _not_a_tensor(arg, facts) and id(arg.value) not in skip):
                    skip.add(id(arg.value))
                    found.append(arg.value)
    return found


# Distributions over other distributions: their arguments are distributions and transforms
_WRAPPERS = frozenset({"Independent", "TransformedDistribution", "MixtureSameFamily",
                       "ExpandedDistribution"})


def _constructs_distribution(call: cst.Call, facts: ModuleFacts) -> bool:
    """`Normal(mu, sigma)`: a distribution class of `torch.distributions` over tensors (not a
    function such as `kl_divergence(p, q)`, not a wrapper of another distribution)."""
    name = facts.imports.resolve(call.func) or ""
    last = name.rsplit(".", 1)[-1]
    return (name.startswith("torch.distributions.") and last[:1].isupper()
            and last not in _WRAPPERS)


def _not_a_tensor(arg: cst.Arg, facts: ModuleFacts) -> bool:
    """`validate_args=False`, `None`, a distribution built in place."""
    value = arg.value
    if arg.keyword is not None and arg.keyword.value == "validate_args":
        return True
    if isinstance(value, cst.Name) and value.value in ("True", "False", "None"):
        return True
    return isinstance(value, cst.Call) and (facts.imports.resolve(value.func) or "").startswith(
        "torch.distributions.")


def _plainly_float32(value: cst.BaseExpression) -> bool:
    if isinstance(value, _NOT_TENSORS):
        return True
    return (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
            and value.func.attr.value in ("float", "double"))
