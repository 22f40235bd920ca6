"""Checkpoints: dicts carrying an optimizer's state that reach `torch.save` or a save helper,
and the places where an optimizer's state is restored from a checkpoint dict."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis.facts import CallSite, ModuleFacts, Statement
from amprewrite.analysis.kinds import Kind, KindTable
from amprewrite.analysis.names import dotted, receiver_key
from amprewrite.analysis.tree import descendants


@dataclass(frozen=True)
class SavedState:
    """An optimizer state entry to pair with the scaler's: a dict element, a `dict(...)`
    keyword, or a `ckpt["optimizer"] = opt.state_dict()` statement."""

    site: CallSite  # the save call the state reaches (the scaler must be reachable there)
    entry: cst.DictElement | cst.Arg | Statement
    container: cst.Dict | cst.Call | None  # the dict literal or `dict(...)` call holding it


@dataclass(frozen=True)
class RestoredState:
    """`optimizer.load_state_dict(checkpoint["optimizer"])`: restore the scaler after it."""

    site: CallSite
    checkpoint: cst.BaseExpression  # `checkpoint`, evaluated again for the scaler's entry
    optimizer: str | None  # the optimizer restored, as a name or attribute


@dataclass(frozen=True)
class AssignedRestore:
    """`optimizer = checkpoint["optimizer"]`: a pickled optimizer resumed by assignment."""

    statement: Statement
    function: cst.FunctionDef | None
    checkpoint: cst.BaseExpression  # `checkpoint`
    subscript: cst.Subscript  # `checkpoint["optimizer"]`, whose quotes the scaler's key takes


@dataclass(frozen=True)
class KeywordRestore:
    """`restart_from_checkpoint(path, model=model, optimizer=optimizer)` of a function of the
    file that loads every keyword it is given (`value.load_state_dict(checkpoint[key])`)."""

    site: CallSite
    guarded: bool  # it loads only the keys the checkpoint has (`if key in checkpoint`)


@dataclass
class Checkpoints:
    """Where training state is saved and restored, and the key for the scaler's state."""

    saved: list[SavedState]
    restored: list[RestoredState]
    key: str  # the checkpoint key for the scaler's state
    # `torch.save(optimizer.state_dict(), path)`: an optimizer's state saved on its own
    alone: list[CallSite] = field(default_factory=list)
    # optimizer states a save holds where no scaler entry can go beside them
    # (`[o.state_dict() for o in optimizers]`)
    unpaired: list[cst.Call] = field(default_factory=list)
    assigned: list[AssignedRestore] = field(default_factory=list)
    by_keyword: list[KeywordRestore] = field(default_factory=list)
    # optimizer restores where no scaler restore can be added, each with what they are:
    # `optimizer.load_state_dict(torch.load(path))`, a restorer amprewrite cannot see into
    unrestored: list[tuple[cst.CSTNode, str]] = field(default_factory=list)


def analyse_checkpoints(facts: ModuleFacts, kinds: KindTable) -> Checkpoints:
    key = "scaler" if "scaler" not in facts.strings else "grad_scaler"
    saved: list[SavedState] = []
    restored: list[RestoredState] = []
    alone: list[CallSite] = []
    unpaired: list[cst.Call] = []
    unrestored: list[tuple[cst.CSTNode, str]] = []
    by_keyword: list[KeywordRestore] = []
    restorers = _keyword_restorers(facts)
    for site in facts.calls:
        if _is_save(site.call, facts):
            entries = [e for arg in site.call.args
                       for e in _optimizer_entries(arg.value, site, facts, kinds)]
            saved.extend(entries)
            if site.call.args and _is_optimizer_state(site.call.args[0].value, kinds):
                alone.append(site)
            else:
                unpaired.extend(_unpaired_states(site.call, entries, kinds))
        elif (optimizer := _loaded_optimizer(site.call, kinds)) is not None:
            state = site.call.args[0].value
            on_own_line = site.small is not None and (
                facts.small_containers.get(site.small) is site.statement
            )
            if (on_own_line and isinstance(state, cst.Subscript)
                    and dotted(state.value) is not None):
                restored.append(RestoredState(site, state.value, receiver_key(optimizer)))
            else:
                unrestored.append((site.call, f"`{facts.one_line(site.call)}` restores "
                                   "the optimizer's state from an expression"))
        elif (given := _optimizer_given(site.call, kinds)) is not None:
            restorer = restorers.get(dotted(site.call.func) or "")
            if restorer is not None and given.keyword is not None:
                by_keyword.append(KeywordRestore(site, restorer))
            elif _named_for_restoring(site.call, facts):
                unrestored.append((site.call, f"`{facts.one_line(site.call.func)}(...)` is "
                                   "given the optimizer to restore, in code amprewrite does not "
                                   "see into"))
    return Checkpoints(_unique(saved), restored, key, alone, unpaired,
                       _assigned_restores(facts, kinds), by_keyword, unrestored)


def _assigned_restores(facts: ModuleFacts, kinds: KindTable) -> list[AssignedRestore]:
    """`optimizer = checkpoint["optimizer"]` on a line of its own, of a key known to hold an
    optimizer (a pickled optimizer object resumed by assignment)."""
    found = []
    for binding in facts.bindings:
        value = binding.value
        if (len(binding.keys) == 1 and kinds.of(binding.keys[0]) is Kind.OPTIMIZER
                and isinstance(value, cst.Subscript) and dotted(value.value) is not None
                and isinstance(binding.statement, cst.SimpleStatementLine)
                and len(binding.statement.body) == 1):
            found.append(AssignedRestore(binding.statement, binding.function,
                                         value.value, value))
    return found


def _optimizer_given(call: cst.Call, kinds: KindTable) -> cst.Arg | None:
    """The argument of `call` that is an optimizer (known by its construction), if any."""
    return next((arg for arg in call.args if not arg.star
                 and kinds.of_expr(arg.value) is Kind.OPTIMIZER), None)


_RESTORING = ("load", "restore", "resume", "restart")


def _named_for_restoring(call: cst.Call, facts: ModuleFacts) -> bool:
    """A call outside torch named for loading a checkpoint (`utils.restart_from_checkpoint`,
    `load_checkpoint`), not a function of the file."""
    name = dotted(call.func)
    if name is None or (facts.imports.resolve(call.func) or "").startswith("torch."):
        return False
    last = name.rsplit(".", 1)[-1].lower()
    local = {f.name.value for f in facts.functions}
    return any(part in last for part in _RESTORING) and name.removeprefix("self.") not in local


def _keyword_restorers(facts: ModuleFacts) -> dict[str, bool]:
    """The file's functions that take `**kwargs` and load the state of each value given
    (`for key, value in kwargs.items(): value.load_state_dict(checkpoint[key])`), by name,
    with whether they load only keys the checkpoint has (`if key in checkpoint`)."""
    found: dict[str, bool] = {}
    for function in facts.functions:
        star = function.params.star_kwarg
        if star is None or function in facts.function_class:
            continue
        kwargs = star.name.value
        for loop in descendants(function.body):
            if not (isinstance(loop, cst.For) and _items_of(loop.iter, kwargs)
                    and isinstance(loop.target, cst.Tuple) and len(loop.target.elements) == 2):
                continue
            key, value = (dotted(e.value) for e in loop.target.elements)
            load = next((node for node in descendants(loop.body) if isinstance(node, cst.Call)
                         and _loads_item(node, key, value)), None)
            if load is not None and key is not None:
                found[function.name.value] = _guarded(loop, load, key)
    return found


def _items_of(node: cst.BaseExpression, name: str) -> bool:
    """`kwargs.items()`."""
    return (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
            and node.func.attr.value == "items" and dotted(node.func.value) == name)


def _loads_item(call: cst.Call, key: str | None, value: str | None) -> bool:
    """`value.load_state_dict(checkpoint[key])`."""
    func = call.func
    if not (isinstance(func, cst.Attribute) and func.attr.value == "load_state_dict"
            and dotted(func.value) == value and call.args):
        return False
    state = call.args[0].value
    return isinstance(state, cst.Subscript) and any(
        isinstance(e.slice, cst.Index) and dotted(e.slice.value) == key for e in state.slice)


def _guarded(loop: cst.For, load: cst.Call, key: str) -> bool:
    """An `if` in the loop tests `key in ...` around the load (`if key in checkpoint and
    value is not None:`)."""
    for node in descendants(loop.body):
        if isinstance(node, cst.If) and any(
                isinstance(test, cst.Comparison) and dotted(test.left) == key
                and any(isinstance(c.operator, cst.In) for c in test.comparisons)
                for test in descendants(node.test)) and any(
                n is load for n in descendants(node.body)):
            return True
    return False


def _unpaired_states(
    save: cst.Call, entries: list[SavedState], kinds: KindTable
) -> list[cst.Call]:
    """`opt.state_dict()` calls inside a save's arguments that are no entry of a dict the
    scaler's state can join: in a list, a comprehension, a nested call."""
    paired = {id(e.entry.value) for e in entries
              if isinstance(e.entry, cst.DictElement | cst.Arg)}
    return [node for arg in save.args for node in descendants(arg.value)
            if isinstance(node, cst.Call) and _is_optimizer_state(node, kinds)
            and id(node) not in paired]


def _is_save(call: cst.Call, facts: ModuleFacts) -> bool:
    """`torch.save(...)` or a helper named for saving (`save_checkpoint`, `save_on_master`)."""
    if facts.imports.resolve(call.func) == "torch.save":
        return True
    name = dotted(call.func)
    return name is not None and "save" in name.rsplit(".", 1)[-1].lower()


def _loaded_optimizer(call: cst.Call, kinds: KindTable) -> cst.BaseExpression | None:
    """`optimizer` of `optimizer.load_state_dict(state)`."""
    func = call.func
    if (isinstance(func, cst.Attribute) and func.attr.value == "load_state_dict"
            and len(call.args) == 1 and kinds.is_optimizer(func.value)):
        return func.value
    return None


def _is_optimizer_state(node: cst.BaseExpression, kinds: KindTable) -> bool:
    """`optimizer.state_dict()`."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "state_dict"
        and kinds.is_optimizer(node.func.value)
    )


def _holds_optimizer(node: cst.BaseExpression, kinds: KindTable) -> bool:
    """`optimizer.state_dict()`, or the optimizer object itself, pickled (`{"optimizer":
    optimizer}`): a key known to hold one, or named for one (`optimizer`, `optim_g`; not
    `{"opt": opt}`, the options more often than not)."""
    if _is_optimizer_state(node, kinds):
        return True
    kind, key = kinds.of_expr(node), receiver_key(node)
    return kind is Kind.OPTIMIZER or (
        kind is None and key is not None and "optim" in key.rsplit(".", 1)[-1].lower())


def _optimizer_entries(
    value: cst.BaseExpression, site: CallSite, facts: ModuleFacts, kinds: KindTable
) -> list[SavedState]:
    """Optimizer-state entries of a dict given literally, as `dict(...)`, or by name."""
    if isinstance(value, cst.Dict):
        return [SavedState(site, e, value) for e in value.elements
                if isinstance(e, cst.DictElement) and _holds_optimizer(e.value, kinds)]
    if isinstance(value, cst.Call) and dotted(value.func) == "dict":
        return [SavedState(site, a, value) for a in value.args
                if a.keyword is not None and _holds_optimizer(a.value, kinds)]
    name = dotted(value)
    if name is None:
        return []
    entries: list[SavedState] = []
    for binding in facts.bindings:  # `state = {...}` earlier in the same function
        if (binding.function is site.function and binding.keys == (name,)
                and isinstance(binding.value, cst.Dict | cst.Call)):
            entries.extend(_optimizer_entries(binding.value, site, facts, kinds))
    for line in _subscript_assignments(facts, kinds, site, name):  # `state["optimizer"] = ...`
        entries.append(SavedState(site, line, None))
    return entries


def _subscript_assignments(
    facts: ModuleFacts, kinds: KindTable, site: CallSite, name: str
) -> list[Statement]:
    lines: list[Statement] = []
    for binding in facts.bindings:
        if binding.function is not site.function or binding.keys != (name,):
            continue
        statement = binding.statement
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        assign = statement.body[0]
        if (isinstance(assign, cst.Assign) and len(assign.targets) == 1
                and isinstance(assign.targets[0].target, cst.Subscript)
                and _holds_optimizer(assign.value, kinds)):
            lines.append(statement)
    return lines


def _unique(saved: list[SavedState]) -> list[SavedState]:
    """One entry per dict element or statement, even when several saves reach it."""
    seen: set[int] = set()
    unique = []
    for state in saved:
        if id(state.entry) not in seen:
            seen.add(id(state.entry))
            unique.append(state)
    return unique
