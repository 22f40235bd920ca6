"""What one path through a program knows at a point: each scaler's possible values, the
conditions it took, whose backwards each optimizer's gradients hold, what was stepped and
unscaled since the last `update()`."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field

from amprewrite.protocol import ir

PLAIN = "@"  # an unscaled backward's contribution begins so (then its line:column); else the
# contribution is the key of the scaler that scaled it


def plain(line: int, col: int) -> str:
    return f"{PLAIN}{line}:{col}"


def is_plain(contribution: str) -> bool:
    return contribution.startswith(PLAIN)


def position(contribution: str) -> tuple[int, int]:
    """Where the unscaled backward of a plain contribution is."""
    line, col = contribution[len(PLAIN):].split(":")
    return int(line), int(col)
LIVE = frozenset({ir.ENABLED, ir.UNKNOWN})  # values under which a scaler scales
BROKEN = frozenset({ir.NONE, ir.UNBOUND})  # values under which calling it raises


@dataclass
class PathState:
    scalers: dict[str, frozenset[str]] = field(default_factory=dict)
    conds: dict[str, tuple[bool, frozenset[str]]] = field(default_factory=dict)
    grads: dict[str, frozenset[str]] = field(default_factory=dict)  # optimizer -> backwards
    others: frozenset[str] = frozenset()  # backwards held by optimizers not yet named
    owners: dict[str, frozenset[str] | None] = field(default_factory=dict)
    stepped: dict[tuple[str, str], ast.AST] = field(default_factory=dict)  # -> the step
    unscaled: frozenset[tuple[str, str]] = frozenset()

    def copy(self) -> PathState:
        return PathState(dict(self.scalers), dict(self.conds), dict(self.grads), self.others,
                         dict(self.owners), dict(self.stepped), self.unscaled)

    def signature(self) -> tuple[object, ...]:
        return (tuple(sorted(self.scalers.items())), tuple(sorted(self.conds.items())),
                tuple(sorted(self.grads.items())), self.others,
                tuple(sorted(self.stepped)), tuple(sorted(self.unscaled)))

    def scaler(self, key: str) -> frozenset[str]:
        return self.scalers.get(key, frozenset({ir.UNKNOWN}))

    def live(self, scaler: str) -> bool:
        return bool(self.scaler(scaler) & LIVE)

    def pending(self, optimizer: str) -> frozenset[str]:
        """The backwards whose gradients `optimizer` would apply now."""
        return self.grads.get(optimizer, self.others)

    def add_backward(self, contribution: str, feeds: Callable[[str], bool]) -> None:
        """A backward's gradients, held by every optimizer it `feeds` (and those unnamed)."""
        self.grads = {k: v | {contribution} if feeds(k) else v for k, v in self.grads.items()}
        self.others = self.others | {contribution}

    def zero(self, optimizer: str | None) -> None:
        if optimizer is None:
            self.grads = dict.fromkeys(self.grads, frozenset())
            self.others = frozenset()
        else:
            self.grads[optimizer] = frozenset()

    def drop_prefix(self, prefixes: tuple[str, ...]) -> None:
        """Forget the keys of a function's frame once it returned."""
        self.scalers = {k: v for k, v in self.scalers.items() if not k.startswith(prefixes)}
        self.grads = {k: v for k, v in self.grads.items() if not k.startswith(prefixes)}
        self.owners = {k: v for k, v in self.owners.items() if not k.startswith(prefixes)}
        self.conds = {k: v for k, v in self.conds.items()
                      if not any(name.startswith(prefixes) for name in v[1])}


def distinct(states: list[PathState]) -> list[PathState]:
    seen: dict[tuple[object, ...], PathState] = {}
    for state in states:
        seen.setdefault(state.signature(), state)
    return list(seen.values())


def join(states: list[PathState]) -> PathState:
    """One state that over-approximates all of `states` (when paths are too many to keep)."""
    first, rest = states[0], states[1:]
    out = first.copy()
    for state in rest:
        for key, values in state.scalers.items():
            out.scalers[key] = out.scalers.get(key, frozenset()) | values
        out.conds = {k: v for k, v in out.conds.items() if state.conds.get(k) == v}
        for key in set(out.grads) | set(state.grads):
            out.grads[key] = out.pending(key) | state.pending(key)
        out.others |= state.others
        for key, owners in state.owners.items():
            if out.owners.get(key, owners) != owners:
                out.owners[key] = None
            else:
                out.owners[key] = owners
        for pair, site in state.stepped.items():
            out.stepped.setdefault(pair, site)
        out.unscaled &= state.unscaled
    return out
