"""Losses that CUDA autocast refuses (`nn.BCELoss`, `F.binary_cross_entropy`).

They raise inside an autocast region on CUDA, so their statements are cut out of the
autocast regions and computed on float32 inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis.facts import CallSite, ModuleFacts, Statement
from amprewrite.analysis.kinds import KindTable
from amprewrite.analysis.names import dotted
from amprewrite.analysis.statements import calls_in, is_compute
from amprewrite.analysis.training_step import Region

_UNSAFE = frozenset({"torch.nn.functional.binary_cross_entropy", "torch.nn.BCELoss"})


@dataclass(frozen=True)
class UnsafeLoss:
    """A statement computing a loss that is unsafe under autocast (float32 inputs needed)."""

    statement: Statement
    calls: tuple[cst.Call, ...]  # the loss calls whose first argument must become float32


@dataclass
class SplitRegions:
    """Autocast regions with the unsafe loss computations cut out of them."""

    regions: list[Region] = field(default_factory=list)  # what stays under autocast
    moved_out: list[UnsafeLoss] = field(default_factory=list)
    inline: list[CallSite] = field(default_factory=list)  # `bce(model(x), y).backward()`

    @property
    def float32_inputs(self) -> list[cst.BaseExpression]:
        """The loss inputs the rewrite casts to float32."""
        return [call.args[0].value for loss in self.moved_out for call in loss.calls]


def unsafe_calls(node: cst.CSTNode, facts: ModuleFacts, kinds: KindTable) -> list[cst.Call]:
    found = []
    for call in calls_in(node):
        name = facts.imports.resolve(call.func) or kinds.constructors.get(
            dotted(call.func) or "", "")
        if name in _UNSAFE and call.args:
            found.append(call)
    return found


def split_unsafe_losses(
    regions: list[Region], facts: ModuleFacts, kinds: KindTable
) -> SplitRegions:
    """Cut statements computing an unsafe loss out of `regions`."""
    result = SplitRegions()
    for region in regions:
        hoist = region.hoist
        if hoist is not None and unsafe_calls(hoist.call.func.value, facts, kinds):  # type: ignore[attr-defined]
            result.inline.append(hoist)  # the model runs inside the loss call: no autocast
            continue
        start = region.start
        for index in range(region.start, region.end + 1):
            statement = region.block.body[index]
            calls = unsafe_calls(statement, facts, kinds)
            if not calls:
                continue
            result.moved_out.append(UnsafeLoss(statement, tuple(calls)))
            if index > start:
                result.regions.append(Region(region.block, start, index - 1))
            start = index + 1
        rest = Region(region.block, start, region.end, hoist)
        if start == region.start:
            result.regions.append(region)
        elif hoist is not None or any(is_compute(s, facts) for s in rest.statements):
            result.regions.append(rest)
    return result
