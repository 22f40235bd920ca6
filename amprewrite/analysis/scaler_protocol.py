"""Where `scaler.update()` goes so that the GradScaler protocol holds on every path.

torch's GradScaler keeps per-optimizer state that only `update()` resets: between two updates
an optimizer is unscaled at most once and stepped at most once (`unscale_` after `step` also
raises), and `update()` itself needs at least one unscale or step since the last one. So every
path of an iteration that unscaled or stepped must reach exactly one `update()` before the
iteration ends (`continue`, `break`, `return` or its last statement), and no path may reach
one without. Gradients are also scaled between backward and unscale: code reading `.grad`
there would see them multiplied by the scale.

The plan is checked on the paths of each iteration (control_flow.py): `update()` right after
the last step of the iteration as an expert writes it, else once after the statement holding
the last step; plus one before each early exit taken after an unscale or step. When neither
holds on every path, the training step is left alone with a finding.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis.control_flow import Exits, PathWalker, State
from amprewrite.analysis.facts import Block, CallSite, ModuleFacts, Statement, body
from amprewrite.analysis.kinds import KindTable, optimizer_loop_elements
from amprewrite.analysis.names import dotted, receiver_key, walk
from amprewrite.analysis.sites import StepSite
from amprewrite.analysis.statements import is_zero_grad
from amprewrite.analysis.tree import children
from amprewrite.analysis.unscaling import Unscale, reads_grad
from amprewrite.catalog import SKIP, Code, declare

PROTOCOL_NOT_KEPT = declare(
    "AMP210", SKIP, "scaler protocol cannot be kept on every path",
    "Between two `scaler.update()`s an optimizer may be unscaled once and stepped once, and "
    "every path that unscaled or stepped must reach one `update()`. Restructure the loop so that "
    "one statement ends every step path (e.g. keep retries around forward and backward only).",
    why=(
        "The loop's paths cannot all keep the scaler's protocol: one unscale and one "
        "step per optimizer between updates, and every stepping path reaching `update()`."
    ),
    example=(
        "for retry in range(3):\n"
        "    loss.backward()\n"
        "    if ok():\n"
        "        optimizer.step()\n"
        "        break"
    ),
)

GRADIENTS_WITHOUT_OPTIMIZER = declare(
    "AMP211", SKIP, "scaled gradients read without an optimizer to unscale them",
    "A path reads or applies `.grad` after a scaled backward and no optimizer step of that path "
    "can unscale them (a manual SGD update): use a torch.optim optimizer on every path, or keep "
    "this step in FP32.",
    why=(
        "After a scaled backward, a path reads or applies `.grad` with no optimizer "
        "step on it to unscale them (a manual update)."
    ),
    example=(
        "loss.backward()\n"
        "for p in model.parameters():\n"
        "    p.data -= lr * p.grad   # a manual update"
    ),
)

READY, UNSCALED, STEPPED = "ready", "unscaled", "stepped"
Scope = cst.For | cst.While | cst.FunctionDef | cst.Module


@dataclass(frozen=True)
class UpdatePoint:
    """`scaler.update()` before or after `node`: a block-level statement, or the one-line
    suite (`if bad: continue`) of an early exit."""

    node: Statement | cst.SimpleStatementSuite
    before: bool


@dataclass(frozen=True)
class Problem:
    """A path on which the protocol cannot be kept."""

    code: Code
    node: cst.CSTNode
    message: str


@dataclass
class ProtocolPlan:
    updates_after: list[StepSite] = field(default_factory=list)  # right after these steps
    updates_at: list[UpdatePoint] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    # ids of the steps and statements with an update() after each step (lazy regularisation)
    per_step: set[int] = field(default_factory=set)


@dataclass(frozen=True)
class _Config:
    """One path's GradScaler state: optimizers not ready, and whether `.grad` is scaled."""

    pending: frozenset[tuple[str, str]] = frozenset()
    scaled: bool = False
    # optimizers unscaled before an `update()` and not stepped since: their gradients are
    # true ones, which a step through the scaler would unscale again
    stale: frozenset[str] = frozenset()


def plan_updates(
    steps: list[StepSite], unscales: list[Unscale], backwards: Sequence[CallSite],
    facts: ModuleFacts, kinds: KindTable,
) -> ProtocolPlan:
    plan = ProtocolPlan()
    scopes: dict[int, tuple[Scope, list[StepSite]]] = {}
    for site in steps:
        scope = iteration_scope(site.statement, facts, kinds)
        scopes.setdefault(id(scope), (scope, []))[1].append(site)
    # Inner loops first: an outer iteration sees the updates planned for the loops it holds
    # (a critic stepped n times per generator step gets `update()` after each of its steps).
    ordered = sorted(scopes.values(), key=lambda item: -_depth(item[0], facts))
    for scope, scope_steps in ordered:
        candidates = (_after_last_steps(scope_steps, facts, kinds),
                      _after_last_statement(scope, scope_steps),
                      _after_last_statement_of_branch(scope, scope_steps, facts),
                      _after_each_step(scope_steps, facts, kinds))
        first: list[Problem] | None = None  # the problems of the expert's placement
        for index, (after, at) in enumerate(candidates):
            checker = _Checker(scope, steps, unscales, backwards, kinds,
                               [*after, *plan.updates_after], [*plan.updates_at, *at])
            problems = checker.complete()
            if not problems:
                plan.updates_after.extend(after)
                plan.updates_at.extend(p for p in checker.at if p not in plan.updates_at)
                if index == len(candidates) - 1:
                    plan.per_step |= {id(site.call) for site in after}
                    plan.per_step |= {id(point.node) for point in at}
                break
            first = problems if first is None else first
        else:
            plan.problems.extend(first or ())
    return plan


def _depth(scope: Scope, facts: ModuleFacts) -> int:
    """How many statements enclose `scope` (the module: none)."""
    return 0 if isinstance(scope, cst.Module) else len(facts.enclosing_statements(scope))


def iteration_scope(statement: Statement, facts: ModuleFacts, kinds: KindTable) -> Scope:
    """The loop whose iteration `statement` belongs to (loops over optimizers do not count),
    else its function, else the module."""
    for outer in facts.enclosing_statements(statement)[1:]:
        if isinstance(outer, cst.FunctionDef):
            return outer
        if isinstance(outer, cst.For | cst.While) and not optimizer_loop_elements(kinds, outer):
            return outer
    return facts.module


def _pending(state: State) -> set[bool]:
    """Whether each path's configuration has an optimizer unscaled or stepped, not updated."""
    return {bool(config.pending) for config in state if isinstance(config, _Config)}


def _body(scope: Scope) -> list[Statement]:
    if isinstance(scope, cst.Module):
        return list(body(scope))
    block = scope.body
    return list(body(block)) if isinstance(block, cst.IndentedBlock) else []


def _after_last_steps(
    steps: list[StepSite], facts: ModuleFacts, kinds: KindTable
) -> tuple[list[StepSite], list[UpdatePoint]]:
    """`update()` right after each step no later step of the iteration follows in the source,
    or after the loop over optimizers holding it."""
    after: list[StepSite] = []
    at: list[UpdatePoint] = []
    for index, site in enumerate(steps):
        later = steps[index + 1:]
        if any(_may_follow(site, other, facts) for other in later):
            continue
        loop = _outermost_optimizer_loop(site.statement, facts, kinds)
        if loop is not None:
            point = UpdatePoint(loop, before=False)
            if point not in at:
                at.append(point)
        elif site.small is not None and _outside_comprehensions(site.call, site.small):
            after.append(site)
        else:
            at.append(UpdatePoint(site.statement, before=False))
    return after, at


def _after_each_step(
    steps: list[StepSite], facts: ModuleFacts, kinds: KindTable
) -> tuple[list[StepSite], list[UpdatePoint]]:
    """`update()` right after every step (after the loop over optimizers holding it): for an
    optimizer stepped twice in one iteration, the second time under `if i % k == 0:` (lazy
    regularisation, StyleGAN2's R1 penalty)."""
    after: list[StepSite] = []
    at: list[UpdatePoint] = []
    for site in steps:
        loop = _outermost_optimizer_loop(site.statement, facts, kinds)
        if loop is not None:
            if UpdatePoint(loop, before=False) not in at:
                at.append(UpdatePoint(loop, before=False))
        elif site.small is not None and _outside_comprehensions(site.call, site.small):
            after.append(site)
        else:
            at.append(UpdatePoint(site.statement, before=False))
    return after, at


def _may_follow(site: CallSite, other: CallSite, facts: ModuleFacts) -> bool:
    chain_a = facts.enclosing_statements(site.statement)
    chain_b = facts.enclosing_statements(other.statement)
    for outer in chain_a[1:]:
        if outer in chain_b and isinstance(outer, cst.If):
            inner_a, inner_b = chain_a[chain_a.index(outer) - 1], chain_b[chain_b.index(outer) - 1]
            return (inner_a in outer.body.body) == (inner_b in outer.body.body)
    return True


def _after_last_statement(
    scope: Scope, steps: list[StepSite]
) -> tuple[list[StepSite], list[UpdatePoint]]:
    """One `update()` after the statement of the iteration body that holds the last step."""
    return _after_last_holder(_body(scope), steps)


def _after_last_holder(
    statements: Sequence[Statement], steps: list[StepSite]
) -> tuple[list[StepSite], list[UpdatePoint]]:
    """One `update()` after the last of `statements` that holds a step."""
    holders = [s for s in statements if any(_contains(s, site.call) for site in steps)]
    return [], ([UpdatePoint(holders[-1], before=False)] if holders else [])


def _after_last_statement_of_branch(
    scope: Scope, steps: list[StepSite], facts: ModuleFacts
) -> tuple[list[StepSite], list[UpdatePoint]]:
    """One `update()` after the statement holding the last step in the innermost branch
    holding every step of the iteration (`if step % update_every == 0:` around the critic,
    actor and temperature steps, the last under `if args.autotune:`), when that is not the
    iteration body itself nor a loop's body."""
    chains = [_blocks_around(step.statement, scope, facts) for step in steps]
    common = next((block for block in chains[0]
                   if all(any(block is other for other in chain) for chain in chains[1:])), None)
    if common is None or not isinstance(common, cst.IndentedBlock):
        return [], []
    owner = facts.statements[body(common)[0]].parent
    if owner is None or isinstance(owner, cst.For | cst.While) or owner is scope:
        return [], []
    return _after_last_holder(body(common), steps)


def _blocks_around(statement: Statement, scope: Scope, facts: ModuleFacts) -> list[Block]:
    """The blocks holding `statement`, innermost first, up to (not including) `scope`'s."""
    blocks: list[Block] = []
    current: Statement | None = statement
    while current is not None and current is not scope:
        info = facts.statements[current]
        if info.parent is scope:
            break
        blocks.append(info.block)
        current = info.parent
    return blocks


def _contains(statement: cst.CSTNode, node: cst.CSTNode) -> bool:
    return any(child is node for child in walk(statement))


def _outermost_optimizer_loop(
    statement: Statement, facts: ModuleFacts, kinds: KindTable
) -> cst.For | None:
    found = None
    for outer in facts.enclosing_statements(statement)[1:]:
        if isinstance(outer, cst.FunctionDef | cst.While):
            break
        if isinstance(outer, cst.For):
            if not optimizer_loop_elements(kinds, outer):
                break
            found = outer
    return found


def _outside_comprehensions(call: cst.Call, small: cst.CSTNode) -> bool:
    """True when `call` runs once per run of `small`, not per element of a comprehension."""
    stack: list[cst.CSTNode] = [small]
    while stack:
        current = stack.pop()
        if current is call:
            return True
        if not isinstance(current, cst.ListComp | cst.SetComp | cst.GeneratorExp | cst.DictComp):
            stack.extend(children(current))
    return False


class _Checker:
    """Walks one iteration with a candidate plan; completes it with an `update()` before each
    early exit taken after an unscale or a step, and reports what cannot be kept."""

    def __init__(self, scope: Scope, steps: list[StepSite], unscales: list[Unscale],
                 backwards: Sequence[CallSite], kinds: KindTable, after: list[StepSite],
                 at: list[UpdatePoint]) -> None:
        self.scope = scope
        self.kinds = kinds
        self.at = list(at)
        self.problems: list[Problem] = []
        self.aliases = self._loop_aliases(scope)
        self.step_calls = {id(s.call): self._key(s.optimizer) for s in steps}
        self.updated_calls = {id(s.call) for s in after}
        self.unscales_before: dict[int, list[str]] = {}
        for point in unscales:
            self.unscales_before.setdefault(id(point.statement), []).append(
                self._key(point.optimizer))
        self.backward_calls = {id(b.call) for b in backwards}

    def complete(self) -> list[Problem]:
        exits = self._walk()
        if self.problems:
            return self.problems
        for line, state in [*exits.continues, *exits.breaks, *exits.returns]:
            need = self._needs_update(line, state)
            if need:
                self.at.append(UpdatePoint(line, before=True))  # type: ignore[arg-type]
        if self._needs_update(_body(self.scope)[-1], exits.fall):
            self.at.append(UpdatePoint(_body(self.scope)[-1], before=False))
        if self.problems:
            return self.problems
        final = self._walk()
        leaks = [line for line, state in [*final.continues, *final.breaks, *final.returns]
                 if True in _pending(state)]
        if True in _pending(final.fall):
            leaks.append(_body(self.scope)[-1])
        for line in leaks:
            self._problem(line, "a path leaves the iteration after an unscale or step without "
                          "reaching `update()`")
        return self.problems

    def _walk(self) -> Exits:
        self.problems = []
        walker = PathWalker(self._effect,
                            lambda loop: bool(optimizer_loop_elements(self.kinds, loop)))
        return walker.block(_body(self.scope), frozenset({_Config()}))

    def _needs_update(self, node: cst.CSTNode, state: State) -> bool:
        pending = _pending(state)
        if pending == {True, False}:
            self._problem(node, "some paths reach here after an unscale or step and others "
                          "without: no single `update()` fits")
        return pending == {True}

    def _problem(self, node: cst.CSTNode, message: str, code: Code = PROTOCOL_NOT_KEPT) -> None:
        problem = Problem(code, node, message)
        if problem not in self.problems:
            self.problems.append(problem)

    # What a statement does to one path's state ------------------------------------------
    def _effect(self, node: cst.CSTNode, when: str, config: Hashable) -> Hashable:
        assert isinstance(config, _Config)
        if when == "before":
            for key in self.unscales_before.get(id(node), ()):
                config = self._advance(node, config, key, UNSCALED)
            if UpdatePoint(node, before=True) in self.at:  # type: ignore[arg-type]
                config = self._update(node, config)
            return config
        if when == "after":
            if UpdatePoint(node, before=False) in self.at:  # type: ignore[arg-type]
                config = self._update(node, config)
            return config
        if isinstance(node, cst.SimpleStatementSuite) and UpdatePoint(node, True) in self.at:
            config = self._update(node, config)
        for call in _ordered_calls(node):
            if id(call) in self.backward_calls:
                config = _Config(config.pending, True, config.stale)
            elif id(call) in self.step_calls:
                config = self._advance(node, config, self.step_calls[id(call)], STEPPED)
                if id(call) in self.updated_calls:
                    config = self._update(node, config)
            elif is_zero_grad(call):
                config = _Config(config.pending, scaled=False)
        if config.scaled and self._reads_scaled_grad(node):
            self._problem(node, "reads `.grad` while the gradients are scaled and no optimizer "
                          "step of this path can unscale them", GRADIENTS_WITHOUT_OPTIMIZER)
        return config

    def _advance(self, node: cst.CSTNode, config: _Config, key: str, status: str) -> _Config:
        current = dict(config.pending).get(key, READY)
        if current == STEPPED or (status == UNSCALED and current == UNSCALED):
            verb = "unscaled" if status == UNSCALED else "stepped"
            self._problem(node, f"`{key}` would be {verb} twice between two `update()`s")
        if key in config.stale:
            self._problem(node, f"`{key}` would be unscaled again after an `update()` that "
                          "followed its `unscale_`")
        pending = frozenset({(k, s) for k, s in config.pending if k != key} | {(key, status)})
        return _Config(pending, scaled=False, stale=config.stale - {key})

    def _update(self, node: cst.CSTNode, config: _Config) -> _Config:
        if not config.pending:
            self._problem(node, "`update()` would run on a path with no unscale or step")
        unscaled = {key for key, status in config.pending if status == UNSCALED}
        return _Config(frozenset(), config.scaled, config.stale | unscaled)

    def _reads_scaled_grad(self, node: cst.CSTNode) -> bool:
        if not isinstance(node, cst.SimpleStatementLine | cst.SimpleStatementSuite):
            return False
        if id(node) in self.unscales_before:
            return False
        return reads_grad(node) and not any(
            isinstance(small, cst.Assign) for small in node.body)

    # Keys ------------------------------------------------------------------------------------
    def _loop_aliases(self, scope: Scope) -> dict[str, str]:
        aliases: dict[str, str] = {}
        for node in walk(scope):
            if isinstance(node, cst.For | cst.CompFor):
                aliases.update({name: key for name, (key, _) in
                                optimizer_loop_elements(self.kinds, node).items()})
        return aliases

    def _key(self, node: cst.BaseExpression) -> str:
        key = receiver_key(node) or dotted(node) or "?"
        return self.aliases.get(key, key)


def _ordered_calls(node: cst.CSTNode) -> list[cst.Call]:
    """Calls of a simple statement in evaluation order (inner calls first)."""
    calls: list[cst.Call] = []

    def visit(current: cst.CSTNode) -> None:
        if type(current) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            return
        for child in children(current):
            visit(child)
        if type(current) is cst.Call:
            calls.append(current)

    visit(node)
    return calls


