"""Low-precision values that leave an autocast region, and the uses that would crash on them.

A tensor computed under autocast (a model's output, a matmul, anything derived from one) is
bfloat16/float16. After the region it reaches code that wants float32 (`dtype.sinks`); the
values are followed by the dtype flow (`dtype.flow`) through each function, its containers,
loops and the returns of the module's functions. Model methods (and helpers called from a
region) run under their caller's autocast: a `.numpy()` inside them counts too.
"""

from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from amprewrite.analysis.dtype.flow import Flow
from amprewrite.analysis.dtype.sinks import (
    DATA_REPLACED,
    Escape,
    Escapes,
    ModuleUses,
    Stuck,
    replaces_own_data,
)
from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.kinds import KindTable
from amprewrite.analysis.training_step import Region

__all__ = ["DATA_REPLACED", "Escape", "Escapes", "Stuck", "dtype_flow", "find_escapes",
           "replaces_own_data"]


def find_escapes(flow: Flow, float32_already: Iterable[cst.CSTNode] = ()) -> Escapes:
    """The uses of values the flow's regions compute that crash outside them, and `.numpy()`
    calls reached under autocast; nodes another rule already makes float32 are skipped."""
    uses = ModuleUses(flow, {id(n) for n in float32_already})
    uses.record()
    return uses.result


def dtype_flow(facts: ModuleFacts, kinds: KindTable, regions: Iterable[Region],
               autocast_expressions: Iterable[cst.CSTNode] = ()) -> Flow:
    """The dtype flow of a module whose `regions` (and `autocast_expressions`) run under
    autocast."""
    in_region: set[int] = set()
    for region in regions:
        in_region.update(id(s) for s in region.statements)
        if region.hoist is not None:  # `crit(out, y).backward()`: the loss moves into it
            in_region.add(id(region.hoist.loss))
    in_region.update(id(node) for node in autocast_expressions)
    return Flow(facts, kinds, in_region)
