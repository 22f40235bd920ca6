"""Paths through the statements of one loop iteration (or one function body).

`PathWalker` interprets a block abstractly: a *state* is the set of configurations the paths
reaching a point may be in, and a caller-supplied `effect` says what a statement does to one
configuration. The walk follows Python's control flow, not block shapes: `if/elif/else`,
`for/while` (run zero or more times, to a fixpoint, or exactly once for loops the caller
marks), `try/except/else/finally` (a handler is entered from any point of its `try` body),
`with`, `match`, and the ways out of an iteration: `continue`, `break`, `return` and `raise`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis.facts import Statement

State = frozenset[Hashable]  # the configurations some path may reach a point in
Effect = Callable[[cst.CSTNode, str, Hashable], Hashable]  # (node, "before"/"at"/"after", config)


@dataclass
class Exits:
    """How control leaves a block, with the state each way out is taken in."""

    fall: State = frozenset()  # reaching the end of the block
    continues: list[tuple[cst.CSTNode, State]] = field(default_factory=list)
    breaks: list[tuple[cst.CSTNode, State]] = field(default_factory=list)
    returns: list[tuple[cst.CSTNode, State]] = field(default_factory=list)
    raised: State = frozenset()  # states at any point an exception may leave from

    def absorb(self, other: Exits) -> None:
        """Take `other`'s ways out (not its fall-through) as this block's own."""
        self.continues.extend(other.continues)
        self.breaks.extend(other.breaks)
        self.returns.extend(other.returns)
        self.raised |= other.raised


class PathWalker:
    """Walks blocks, applying `effect` to every configuration at every statement.

    `effect(node, "before", config)` runs before any statement (compound ones too),
    `effect(node, "at", config)` for a simple statement line, `effect(node, "after", config)`
    when a statement completes normally. `once(loop)` marks loops whose body runs exactly once
    (a loop over a container of optimizers acts on each element once)."""

    def __init__(self, effect: Effect, once: Callable[[cst.For | cst.While], bool]) -> None:
        self.effect = effect
        self.once = once

    def block(self, statements: Sequence[Statement], state: State) -> Exits:
        exits = Exits()
        for statement in statements:
            if not state:
                break  # unreachable from here on
            state = self._apply(statement, "before", state)
            inner = self._statement(statement, state)
            exits.absorb(inner)
            state = self._apply(statement, "after", inner.fall)
        exits.fall = state
        return exits

    def _apply(self, node: cst.CSTNode, when: str, state: State) -> State:
        return frozenset(self.effect(node, when, config) for config in state)

    def _statement(self, statement: Statement, state: State) -> Exits:
        if isinstance(statement, cst.SimpleStatementLine):
            return self._line(statement, state)
        if isinstance(statement, cst.If):
            return self._if(statement, state)
        if isinstance(statement, cst.For | cst.While):
            return self._loop(statement, state)
        if isinstance(statement, cst.Try | cst.TryStar):
            return self._try(statement, state)
        if isinstance(statement, cst.With):
            return self._suite(statement.body, state)
        if isinstance(statement, cst.Match):
            exits = Exits(fall=state)
            for case in statement.cases:
                branch = self._suite(case.body, state)
                exits.absorb(branch)
                exits.fall |= branch.fall
            return exits
        return Exits(fall=state)  # def, class: nothing runs now

    def _suite(self, suite: cst.BaseSuite, state: State) -> Exits:
        if isinstance(suite, cst.IndentedBlock):
            return self.block(suite.body, state)
        return self._line(suite, state)  # `if x: continue` on one line

    def _line(self, line: cst.SimpleStatementLine | cst.SimpleStatementSuite,
              state: State) -> Exits:
        after = self._apply(line, "at", state)
        exits = Exits(raised=state | after)
        last = line.body[-1] if line.body else None
        if isinstance(last, cst.Continue):
            exits.continues.append((line, after))
        elif isinstance(last, cst.Break):
            exits.breaks.append((line, after))
        elif isinstance(last, cst.Return):
            exits.returns.append((line, after))
        elif not isinstance(last, cst.Raise):
            exits.fall = after
        return exits

    def _if(self, statement: cst.If, state: State) -> Exits:
        exits = self._suite(statement.body, state)
        orelse = statement.orelse
        if orelse is None:
            exits.fall |= state
            return exits
        other = self._if(orelse, state) if isinstance(orelse, cst.If) else self._suite(
            orelse.body, state)
        exits.absorb(other)
        exits.fall |= other.fall
        return exits

    def _loop(self, loop: cst.For | cst.While, state: State) -> Exits:
        exits = Exits()
        if self.once(loop):
            body = self._suite(loop.body, state)
            entry = body.fall.union(*(s for _, s in body.continues))
        else:
            entry = state
            while True:  # states form a finite lattice: this reaches a fixpoint
                body = self._suite(loop.body, entry)
                grown = entry.union(body.fall, *(s for _, s in body.continues))
                if grown == entry:
                    break
                entry = grown
        exits.returns.extend(body.returns)
        exits.raised |= body.raised
        done = entry
        if loop.orelse is not None:
            orelse = self._suite(loop.orelse.body, entry)
            exits.absorb(orelse)
            done = orelse.fall
        exits.fall = done.union(*(s for _, s in body.breaks))
        return exits

    def _try(self, statement: cst.Try | cst.TryStar, state: State) -> Exits:
        body = self.block(statement.body.body, state)
        exits = Exits()
        exits.continues, exits.breaks, exits.returns = body.continues, body.breaks, body.returns
        entry = state | body.raised  # a handler starts wherever the body may have raised
        fall = body.fall
        if statement.orelse is not None:
            orelse = self._suite(statement.orelse.body, body.fall)
            exits.absorb(orelse)
            fall = orelse.fall
        for handler in statement.handlers:
            caught = self._suite(handler.body, entry)
            exits.absorb(caught)
            fall |= caught.fall
        if statement.finalbody is not None:
            final = self._suite(statement.finalbody.body, fall | entry)
            exits.absorb(final)
            fall = self._suite(statement.finalbody.body, fall).fall
        exits.fall = fall
        return exits
