"""Per-module memos: analyses that depend only on a module's facts and kind table, computed
once and shared by every analysis that reads them."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, TypeVar

from amprewrite.analysis.facts import ModuleFacts

if TYPE_CHECKING:
    from amprewrite.analysis.kinds import KindTable

T = TypeVar("T")

# A module's analyses run together (a project's group interleaves a few modules), so only the
# results for the modules analysed last stay in memory.
_KEPT = 4


def per_module(
    compute: Callable[[ModuleFacts, KindTable], T]
) -> Callable[[ModuleFacts, KindTable], T]:
    """`compute(facts, kinds)`, memoised by the kind table (one per analysed module)."""
    recent: list[tuple[KindTable, T]] = []

    @wraps(compute)
    def memoised(facts: ModuleFacts, kinds: KindTable) -> T:
        assert kinds.facts is facts
        for known, value in recent:
            if known is kinds:
                return value
        value = compute(facts, kinds)
        recent.insert(0, (kinds, value))
        del recent[_KEPT:]
        return value

    return memoised
