"""Follow every path the checker can see through a module's functions, and report where the
AMP protocol breaks on one.

Paths are kept apart (a list of `PathState`s), so that what a test narrowed stays with the
path that took it (`if scaler is None:`, `if args.amp:`). The module's own functions are
followed into at their calls (their parameters bound to the callers' keys), and loops are run
until their states repeat. Functions nothing in the module calls are followed from their own
entry, with what the module level leaves behind and, for methods, what `__init__` sets."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from itertools import count

from amprewrite.catalog import Code
from amprewrite.protocol import ir
from amprewrite.protocol.invariants import (
    BACKWARD_IN_AUTOCAST,
    GRADIENTS_READ_SCALED,
    NO_UPDATE,
    PLAIN_STEP_OF_SCALED,
    SCALER_MAYBE_NONE,
    STEPPED_TWICE,
    UNSCALED_INTO_SCALED_STEP,
    UNSCALED_TWICE,
    Violation,
)
from amprewrite.protocol.keys import rebase, root_of
from amprewrite.protocol.paths import (
    BROKEN,
    LIVE,
    PathState,
    distinct,
    is_plain,
    join,
    plain,
    position,
)
from amprewrite.protocol.program import Program

MAX_PATHS = 32  # more paths than this at one point are joined into one
MAX_DEPTH = 8  # calls followed into, nested
MAX_LOOP_ROUNDS = 6
BUDGET = 200_000  # path-steps per module: past it, what was found stands, no AMP704


class _OutOfBudget(Exception):
    pass


@dataclass
class Flow:
    """The states leaving a block: falling through, by break, continue and return."""

    fall: list[PathState] = field(default_factory=list)
    breaks: list[PathState] = field(default_factory=list)
    continues: list[PathState] = field(default_factory=list)
    returns: list[PathState] = field(default_factory=list)

    def absorb(self, other: Flow) -> None:
        self.breaks += other.breaks
        self.continues += other.continues
        self.returns += other.returns


@dataclass(frozen=True)
class Frame:
    """One function being followed: how its keys read in the outermost caller's terms."""

    function: ir.Function
    mapping: dict[str, str]  # a name of the function -> the key it stands for
    prefixes: tuple[str, ...]  # of the keys made for its locals and unbound parameters
    stack: tuple[str, ...]
    autocast: int = 0
    outer: Frame | None = None  # where a nested function reads its free names

    def key(self, key: str) -> str:
        root = root_of(key)
        mapped = self.mapping.get(root)
        if mapped is not None:
            return rebase(key, root, mapped)
        if self.outer is not None and root not in self.function.local_names:
            return self.outer.key(key)
        return key

    def text(self, cond: ir.Cond) -> tuple[str, frozenset[str]]:
        """A condition in the outermost caller's terms, and the names it reads."""
        if not any(name in self.mapping or self.outer is not None for name in cond.names):
            return cond.text, cond.names
        text = cond.text
        for name in cond.names:
            text = re.sub(rf"\b{re.escape(name)}\b", self.key(name), text)
        return text, frozenset(root_of(self.key(name)) for name in cond.names)


class Interpreter:
    def __init__(self, program: Program, observe: bool = False) -> None:
        self.program = program
        # with `observe`: each event's (line, column) -> each scaler key's values there, on
        # every path (the lint asks where the script's scaler may be None or off)
        self.observe = observe
        self.observed: dict[tuple[int, int], dict[str, frozenset[str]]] = {}
        # with `observe`: each step's (line, column) -> the unscaled backwards whose gradients
        # it applies, on some path
        self.fed: dict[tuple[int, int], set[tuple[int, int]]] = {}
        self.plain_steps: set[tuple[int, int]] = set()  # `optimizer.step()`, not the scaler's
        self.violations: dict[tuple[str, int, int], Violation] = {}
        self.steps = 0
        self.fresh = count()
        self.complete = True
        self.init_exits: dict[str, list[PathState]] = {}
        self.updated_by_class: dict[str, bool] = {}

    # --- roots ---

    def check(self) -> list[Violation]:
        program = self.program
        called = {name for function in program.functions.values() for name in function.calls}
        module = program.functions[""]
        try:
            exits = self.root(module, [PathState()])
            base = [self._globals_of(s) for s in exits] or [PathState()]
            for name, function in program.functions.items():
                if name and name not in called:
                    self.root(function, self._entry(function, base))
        except _OutOfBudget:
            self.complete = False
        return sorted(self.violations.values(), key=lambda v: (v.line, v.col, v.code))

    def root(self, function: ir.Function, entry: list[PathState]) -> list[PathState]:
        frame = Frame(function, {}, (), (function.qualname,))
        states = [self._enter_locals(s.copy(), function, frame) for s in entry]
        flow = self.block(function.body, states, frame)
        exits = distinct(flow.fall + flow.returns)
        if self.complete and not self._updated_elsewhere(function):
            for state in exits:
                for (scaler, _), site in state.stepped.items():
                    if state.live(scaler):
                        self.report(NO_UPDATE, site, function, f"`{scaler}.step(...)` is not "
                                    f"followed by `{scaler}.update()` on every path")
        return exits

    def _entry(self, function: ir.Function, base: list[PathState]) -> list[PathState]:
        if function.cls is None or function.qualname.endswith(".__init__"):
            return base
        init = self.program.method(function.cls, "__init__")
        if init is None:
            return base
        if init not in self.init_exits:
            init_function = self.program.functions[init]
            self.init_exits[init] = [self._attributes_of(s, init_function) for s in
                                     self.root(init_function, self._entry(init_function, base))]
        out = []
        for world in base:
            for facts in self.init_exits[init] or [PathState()]:
                if any(world.conds.get(k, v) != v for k, v in facts.conds.items()):
                    continue  # `__init__` took the other arm of a test this world took
                state = world.copy()
                state.scalers.update(facts.scalers)
                state.owners.update(facts.owners)
                state.conds.update(facts.conds)
                out.append(state)
        return distinct(out)[:MAX_PATHS] if len(out) <= MAX_PATHS else [join(out)]

    @staticmethod
    def _globals_of(state: PathState) -> PathState:
        """What a function entered later may rely on: scalers and conditions."""
        return PathState(scalers=dict(state.scalers), conds=dict(state.conds),
                         owners=dict(state.owners))

    @staticmethod
    def _attributes_of(state: PathState, init: ir.Function) -> PathState:
        """What `__init__` leaves on `self`, and the tests of the module's names it took
        (the models an optimizer is built over, where they are named by `__init__`'s own
        variables, are not known elsewhere)."""
        def outside(owners: frozenset[str] | None) -> frozenset[str] | None:
            if owners is None or any(root_of(o) in init.local_names - {"self"} for o in owners):
                return None
            return owners

        local = init.local_names - {"self"}
        return PathState(scalers={k: v for k, v in state.scalers.items() if k.startswith("self.")},
                         conds={k: v for k, v in state.conds.items() if not v[1] & local},
                         owners={k: outside(v) for k, v in state.owners.items()
                                 if k.startswith("self.")})

    def _enter_locals(self, state: PathState, function: ir.Function, frame: Frame) -> PathState:
        """A function's own scalers start unbound; its parameters may be anything (None too,
        where it defaults to None or tests it against None)."""
        for key in self.program.scalers:
            root = root_of(key)
            if root == "self" or root not in function.local_names:
                continue
            mapped = frame.key(key)
            if root in function.params:
                if root not in frame.mapping or mapped.startswith(frame.prefixes or ("\0",)):
                    values = {ir.UNKNOWN} | ({ir.NONE} if root in function.maybe_none else set())
                    state.scalers[mapped] = frozenset(values)
            else:
                state.scalers[mapped] = frozenset({ir.UNBOUND})
        if function.qualname.endswith("__init__") and function.cls is not None:
            for key in self._attributes_set(function):  # not there until __init__ sets it
                state.scalers[frame.key(key)] = frozenset({ir.UNBOUND})
        return state

    def _attributes_set(self, init: ir.Function) -> set[str]:
        """The scaler attributes of `self` an `__init__` assigns on some path."""
        return {node.key for node in _nodes(init.body)
                if isinstance(node, ir.Assign) and node.key.startswith("self.")}

    def _updated_elsewhere(self, function: ir.Function) -> bool:
        """A method whose class has another method calling a scaler's `update()`: some
        caller outside this module may run it after this one."""
        if function.cls is None:
            return False
        if function.cls not in self.updated_by_class:
            self.updated_by_class[function.cls] = any(
                _calls_update(other.body) for other in self.program.functions.values()
                if other.cls == function.cls and other is not function)
        return self.updated_by_class[function.cls]

    # --- blocks ---

    def block(self, block: ir.Block, states: list[PathState], frame: Frame) -> Flow:
        flow = Flow(fall=states)
        for node in block:
            if not flow.fall:
                break
            self.steps += len(flow.fall)
            if self.steps > BUDGET:
                raise _OutOfBudget
            out = self.node(node, flow.fall, frame)
            flow.absorb(out)
            flow.fall = _bounded(out.fall)
        return flow

    def node(self, node: ir.Node, states: list[PathState], frame: Frame) -> Flow:
        if isinstance(node, ir.If):
            return self._if(node, states, frame)
        if isinstance(node, ir.Loop):
            return self._loop(node, states, frame)
        if isinstance(node, ir.Try):
            return self._try(node, states, frame)
        if isinstance(node, ir.Autocast):
            return self.block(node.body, states, replace(frame, autocast=frame.autocast + 1))
        if isinstance(node, ir.Jump):
            if node.kind == "return":
                return Flow(returns=states)
            if node.kind == "break":
                return Flow(breaks=states)
            if node.kind == "continue":
                return Flow(continues=states)
            return Flow()
        if isinstance(node, ir.Call):
            return Flow(fall=self._call(node, states, frame))
        out: list[PathState] = []
        for state in states:
            out.extend(self.event(node, state, frame))
        return Flow(fall=out)

    def _if(self, node: ir.If, states: list[PathState], frame: Frame) -> Flow:
        then, otherwise = [], []
        for state in states:
            then.extend(self.narrow(state, node.test.when_true, frame))
            otherwise.extend(self.narrow(state, node.test.when_false, frame))
        flow = self.block(node.body, then, frame)
        other = self.block(node.orelse, otherwise, frame)
        flow.absorb(other)
        flow.fall = flow.fall + other.fall
        return flow

    def _loop(self, node: ir.Loop, states: list[PathState], frame: Frame) -> Flow:
        """Run the body until its states repeat; the loop is left from any state an
        iteration starts with (not before the first, for a loop over optimizers), and by
        break."""
        seen = {s.signature() for s in states}
        entries = [] if node.each else list(states)
        frontier = list(states)
        breaks: list[PathState] = []
        result = Flow()
        for _ in range(1 if node.each else MAX_LOOP_ROUNDS):  # one pass: each element's turn
            flow = self.block(node.body, frontier, frame)
            breaks += flow.breaks
            result.returns += flow.returns
            again = distinct(flow.fall + flow.continues)
            if node.each:
                entries += again
            frontier = [s for s in again if s.signature() not in seen]
            seen.update(s.signature() for s in frontier)
            if not frontier:
                break
            if not node.each:
                entries += frontier
            frontier = _bounded(frontier)
        exits = [] if node.endless else _bounded(distinct(entries))
        after = self.block(node.orelse, exits, frame)
        result.absorb(after)
        result.fall = after.fall + breaks
        return result

    def _try(self, node: ir.Try, states: list[PathState], frame: Frame) -> Flow:
        body = self.block(node.body, [s.copy() for s in states], frame)
        result = Flow()
        result.absorb(body)
        caught = _bounded(distinct(states + body.fall))
        for handler in node.handlers:
            flow = self.block(handler, [s.copy() for s in caught], frame)
            result.absorb(flow)
            result.fall += flow.fall
        orelse = self.block(node.orelse, body.fall, frame)
        result.absorb(orelse)
        result.fall += orelse.fall
        if node.final:
            final = self.block(node.final, _bounded(distinct(result.fall)), frame)
            result.absorb(final)
            result.fall = final.fall
        return result

    # --- tests ---

    def narrow(self, state: PathState, atoms: Iterable[ir.Atom], frame: Frame) -> list[PathState]:
        """`state` where all of `atoms` hold: none if it contradicts them."""
        out = state.copy()
        for atom in atoms:
            if isinstance(atom, ir.Impossible):
                return []
            if isinstance(atom, ir.FlagTest):
                text, names = frame.text(atom.cond)
                known = out.conds.get(text)
                if known is not None and known[0] != atom.value:
                    return []
                out.conds[text] = (atom.value, names)
                continue
            key = frame.key(atom.key)
            values = out.scaler(key)
            if atom.none is True:
                values = frozenset({ir.NONE}) if values & {ir.NONE, ir.UNKNOWN} else frozenset()
            elif atom.none is False:
                values = values - BROKEN
            if atom.enabled is True:
                values = values - {ir.DISABLED, ir.NONE, ir.UNBOUND}
            elif atom.enabled is False:
                values = (frozenset({ir.DISABLED}) if values & (LIVE | {ir.DISABLED})
                          else frozenset())
            if not values:
                return []
            out.scalers[key] = values
        return [out]

    # --- events ---

    def event(self, node: ir.Node, state: PathState, frame: Frame) -> list[PathState]:
        if self.observe and not isinstance(node, ir.Assign | ir.Forget | ir.Build):
            self._note_values(node, state, frame)
        if isinstance(node, ir.Probe):
            return [state]
        if isinstance(node, ir.Assign):
            return self._assign(node, state, frame)
        state = state.copy()
        if isinstance(node, ir.Forget):
            names = {root_of(frame.key(name)) for name in node.names}
            state.conds = {k: v for k, v in state.conds.items() if not v[1] & names}
        elif isinstance(node, ir.Build):
            optimizer = frame.key(node.optimizer)
            state.owners[optimizer] = (
                None if node.owners is None else frozenset(frame.key(o) for o in node.owners))
            state.grads[optimizer] = frozenset()
        elif isinstance(node, ir.ScalerCall):
            return self._scaler_call(node, state, frame)
        elif isinstance(node, ir.Backward):
            self._backward(node, state, frame)
        elif isinstance(node, ir.Step):
            for optimizer in self._optimizers(node.optimizer, frame):
                pending = state.pending(optimizer)
                self._note_fed(node.node, pending, plain_step=True)
                scaled = sorted(c for c in pending if not is_plain(c) and state.live(c))
                if scaled:
                    self.report(PLAIN_STEP_OF_SCALED, node.node, frame.function,
                                f"`{node.optimizer}.step()` applies gradients scaled by "
                                f"`{scaled[0]}`: step through "
                                f"`{scaled[0]}.step({node.optimizer})`", _sources(pending))
                state.zero(optimizer)
        elif isinstance(node, ir.Zero):
            if node.optimizer is None:
                state.zero(None)
            for optimizer in self._optimizers(node.optimizer, frame):
                state.zero(optimizer)
        elif isinstance(node, ir.GradUse):
            self._grad_use(node, state, frame)
        return [state]

    def _note_fed(self, site: ast.AST, pending: frozenset[str], plain_step: bool = False) -> None:
        if self.observe:
            where = (getattr(site, "lineno", 0), getattr(site, "col_offset", 0))
            self.fed.setdefault(where, set()).update(_sources(pending))
            if plain_step:
                self.plain_steps.add(where)

    def _note_values(self, node: ir.Node, state: PathState, frame: Frame) -> None:
        site = node.node  # type: ignore[union-attr]
        where = (getattr(site, "lineno", 0), getattr(site, "col_offset", 0))
        seen = self.observed.setdefault(where, {})
        for key in self.program.scalers:
            seen[key] = seen.get(key, frozenset()) | state.scaler(frame.key(key))

    def _assign(self, node: ir.Assign, state: PathState, frame: Frame) -> list[PathState]:
        key = frame.key(node.key)
        out = []
        for world, values in self.values(node.value, state, frame):
            world = world.copy()
            world.scalers[key] = values
            out.append(world)
        return out

    def values(
        self, value: ir.Value, state: PathState, frame: Frame
    ) -> list[tuple[PathState, frozenset[str]]]:
        if isinstance(value, str):
            return [(state, frozenset({value}))]
        if isinstance(value, ir.Copy):
            return [(state, state.scaler(frame.key(value.key)))]
        if isinstance(value, ir.Choice):
            return [pair for world in self.narrow(state, value.test.when_true, frame)
                    for pair in self.values(value.then, world, frame)] + [
                    pair for world in self.narrow(state, value.test.when_false, frame)
                    for pair in self.values(value.otherwise, world, frame)]
        if value.enabled is not None:
            return [(state, frozenset({ir.ENABLED if value.enabled else ir.DISABLED}))]
        if value.flag is None:
            return [(state, frozenset({ir.UNKNOWN}))]
        out = []
        for flag in (True, False):
            for world in self.narrow(state, [ir.FlagTest(value.flag, flag)], frame):
                on = flag != value.negated
                out.append((world, frozenset({ir.ENABLED if on else ir.DISABLED})))
        return out

    def _scaler_call(self, node: ir.ScalerCall, state: PathState, frame: Frame) -> list[PathState]:
        scaler = frame.key(node.scaler)
        values = state.scaler(scaler)
        if values & BROKEN:
            what = "None" if ir.NONE in values else "not bound"
            self.report(SCALER_MAYBE_NONE, node.node, frame.function,
                        f"`{node.scaler}.{node.method}(...)` runs on a path where "
                        f"`{node.scaler}` is {what}")
            values = values - BROKEN
            if not values:
                return []  # that path raises here
            state.scalers[scaler] = values
        if node.optimizer is None:
            if node.method == "update":
                state.stepped = {p: s for p, s in state.stepped.items() if p[0] != scaler}
                state.unscaled = frozenset(p for p in state.unscaled if p[0] != scaler)
            return [state]
        for optimizer in self._optimizers(node.optimizer, frame):
            self._scaler_on(node, state, frame, values, scaler, optimizer)
        return [state]

    def _optimizers(self, optimizer: str | None, frame: Frame) -> list[str]:
        """The keys an optimizer key stands for: each element of a collection built here
        for `optimizers[*]` (a loop over them; a namespace's elements by subscript, as the
        builder spells them), else itself."""
        if optimizer is None:
            return []
        base = optimizer[:-3] if optimizer.endswith("[*]") else None
        names = self.program.collections.get(base) if base is not None else None
        if names is None:
            return [frame.key(optimizer)]
        assert base is not None
        mapped = frame.key(base)
        return [mapped + name for name in names if name.startswith("[")] or [
            mapped + name for name in names]

    def _scaler_on(
        self, node: ir.ScalerCall, state: PathState, frame: Frame, values: frozenset[str],
        scaler: str, optimizer: str,
    ) -> None:
        """`scaler.step(optimizer)` or `scaler.unscale_(optimizer)` for one optimizer."""
        pair = (scaler, optimizer)
        if node.method == "step":
            self._note_fed(node.node, state.pending(optimizer))
            if values & LIVE:
                self._check_step_inputs(node, state, frame, scaler, optimizer)
                if pair in state.stepped and not _each(optimizer):
                    self.report(STEPPED_TWICE, node.node, frame.function,
                                f"`{node.optimizer}` goes through `{node.scaler}.step` again "
                                f"before `{node.scaler}.update()`")
                state.stepped[pair] = node.node
            state.unscaled = state.unscaled - {pair}
            state.zero(optimizer)
        elif node.method == "unscale_":
            if (pair in state.unscaled or pair in state.stepped) and not _each(optimizer):
                when = "again" if pair in state.unscaled else "after its step"
                self.report(UNSCALED_TWICE, node.node, frame.function,
                            f"`{node.scaler}.unscale_({node.optimizer})` runs {when} before "
                            f"`{node.scaler}.update()`")
            state.grads.setdefault(optimizer, state.others)
            state.unscaled = state.unscaled | {pair}

    def _check_step_inputs(
        self, node: ir.ScalerCall, state: PathState, frame: Frame, scaler: str, optimizer: str
    ) -> None:
        foreign = sorted(c for c in state.pending(optimizer) if c != scaler)
        if not foreign:
            return
        source = ("an unscaled backward" if any(is_plain(c) for c in foreign)
                  else f"a backward scaled by `{foreign[0]}`")
        self.report(UNSCALED_INTO_SCALED_STEP, node.node, frame.function,
                    f"`{node.scaler}.step({node.optimizer})` applies gradients of {source} "
                    f"(since `{node.optimizer}` was last zeroed or stepped): it divides them "
                    "by the scale too", _sources(foreign))

    def _backward(self, node: ir.Backward, state: PathState, frame: Frame) -> None:
        if frame.autocast:
            self.report(BACKWARD_IN_AUTOCAST, node.node, frame.function,
                        "a backward runs inside an autocast region; the region should end "
                        "before it")
        contribution = plain(getattr(node.node, "lineno", 0), getattr(node.node, "col_offset", 0))
        if node.scaler is not None:
            scaler = frame.key(node.scaler)
            if state.scaler(scaler) & LIVE:
                contribution = scaler
        reach = None if node.reach is None else frozenset(frame.key(k) for k in node.reach)
        state.add_backward(contribution, lambda optimizer: self._feeds(optimizer, reach, state))

    def _grad_use(self, node: ir.GradUse, state: PathState, frame: Frame) -> None:
        targets = None if node.targets is None else frozenset(
            target for t in node.targets for target in (
                [f"opt:{k}" for k in self._optimizers(t[4:], frame)] if t.startswith("opt:")
                else [frame.key(t)]))
        for optimizer, pending in state.grads.items():
            for scaler in pending:
                if (not is_plain(scaler) and state.live(scaler)
                        and (scaler, optimizer) not in state.unscaled
                        and self._associated(optimizer, targets, state)):
                    self.report(GRADIENTS_READ_SCALED, node.node, frame.function,
                                f"gradients are read or changed here before "
                                f"`{scaler}.unscale_({optimizer})`")
                    return
        if state.grads or (targets is not None and all(t.startswith("tensor:") for t in targets)):
            return  # the optimizers named so far are all there is to check
        named = {scaler for scaler, _ in state.unscaled}
        for scaler in state.others:
            if not is_plain(scaler) and state.live(scaler) and scaler not in named:
                self.report(GRADIENTS_READ_SCALED, node.node, frame.function,
                            f"gradients of a backward scaled by `{scaler}` are read or "
                            f"changed here before any `{scaler}.unscale_(...)`")
                return

    def _feeds(
        self, optimizer: str, reach: frozenset[str] | None, state: PathState
    ) -> bool:
        """Whether a loss computed by `reach` may have gradients in `optimizer`'s models."""
        if reach is None:
            return True
        owners = state.owners.get(optimizer, self.program.optimizers.get(optimizer))
        return owners is None or any(_related(r, o) for r in reach for o in owners)

    def _associated(
        self, optimizer: str, targets: frozenset[str] | None, state: PathState
    ) -> bool:
        """Whether gradients used at `targets` may be `optimizer`'s."""
        if targets is None or f"opt:{optimizer}" in targets:
            return True
        models = {t for t in targets if not t.startswith("opt:")}
        if not models:
            return False
        owners = state.owners.get(optimizer, self.program.optimizers.get(optimizer))
        if owners is None:
            return True
        return any(_related(t, o) for t in models for o in owners)

    # --- calls ---

    def _call(self, node: ir.Call, states: list[PathState], frame: Frame) -> list[PathState]:
        callee = self.program.functions[node.function]
        if len(frame.stack) >= MAX_DEPTH or node.function in frame.stack:
            return states
        serial = next(self.fresh)
        local = f"{node.function}#{serial}:"
        unbound = f"?{node.function}#{serial}:"
        mapping: dict[str, str] = {}
        for param, argument in node.bindings:
            mapping[param] = unbound + param if argument is None else frame.key(argument)
        for name in callee.local_names - set(callee.params):
            mapping[name] = local + name
        nested = callee.parent is not None and callee.parent == frame.function.qualname
        inner = Frame(callee, mapping, (local, unbound), (*frame.stack, node.function),
                      frame.autocast, frame if nested else None)
        entry = [self._enter_locals(s.copy(), callee, inner) for s in states]
        flow = self.block(callee.body, entry, inner)
        out = []
        for state in flow.fall + flow.returns:
            state.drop_prefix(inner.prefixes)
            out.append(state)
        return _bounded(distinct(out))

    # --- reporting ---

    def report(
        self, code: Code, node: ast.AST, function: ir.Function, message: str,
        sources: tuple[tuple[int, int], ...] = (),
    ) -> None:
        line, col = getattr(node, "lineno", 1), getattr(node, "col_offset", 0)
        where = (code.id, line, col)
        known = self.violations.get(where)
        if known is None:
            self.violations[where] = Violation(code, line, col, function.qualname, message,
                                               ast.unparse(node) if isinstance(node, ast.expr)
                                               else type(node).__name__, sources)
        elif sources and not set(sources) <= set(known.sources):
            self.violations[where] = replace(
                known, sources=tuple(sorted({*known.sources, *sources})))


def _related(first: str, second: str) -> bool:
    """One key is the other or part of it (`model` and `model.fc`, `self.nets['g']`)."""
    return (first == second or first.startswith((second + ".", second + "["))
            or second.startswith((first + ".", first + "[")))


def _sources(contributions: Iterable[str]) -> tuple[tuple[int, int], ...]:
    """Where the unscaled backwards among `contributions` are."""
    return tuple(sorted(position(c) for c in contributions if is_plain(c)))


def _each(optimizer: str) -> bool:
    """A key standing for each optimizer of a collection (`for opt in optimizers`)."""
    return "[*]" in optimizer


def _bounded(states: list[PathState]) -> list[PathState]:
    if len(states) <= MAX_PATHS:
        return states
    states = distinct(states)
    return states if len(states) <= MAX_PATHS else [join(states)]


def _calls_update(block: ir.Block) -> bool:
    return any(isinstance(n, ir.ScalerCall) and n.method == "update" for n in _nodes(block))


def _nodes(block: ir.Block) -> Iterable[ir.Node]:
    """Every node of a block and of the blocks nested in it."""
    for node in block:
        yield node
        for inner in _blocks_of(node):
            yield from _nodes(inner)


def _blocks_of(node: ir.Node) -> tuple[ir.Block, ...]:
    if isinstance(node, ir.If | ir.Loop):
        return (node.body, node.orelse)
    if isinstance(node, ir.Try):
        return (node.body, *node.handlers, node.orelse, node.final)
    if isinstance(node, ir.Autocast):
        return (node.body,)
    return ()
