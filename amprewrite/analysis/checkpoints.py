"""Checkpoints: dicts carrying an optimizer's state that reach `torch.save` or a save helper,
and the places where an optimizer's state is restored from a checkpoint dict."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis.facts import CallSite, ModuleFacts, Statement
from amprewrite.analysis.kinds import KindTable
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


def analyse_checkpoints(facts: ModuleFacts, kinds: KindTable) -> Checkpoints:
    key = "scaler" if "scaler" not in facts.strings else "grad_scaler"
    saved: list[SavedState] = []
    restored: list[RestoredState] = []
    alone: list[CallSite] = []
    unpaired: list[cst.Call] = []
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
    return Checkpoints(_unique(saved), restored, key, alone, unpaired)


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


def _optimizer_entries(
    value: cst.BaseExpression, site: CallSite, facts: ModuleFacts, kinds: KindTable
) -> list[SavedState]:
    """Optimizer-state entries of a dict given literally, as `dict(...)`, or by name."""
    if isinstance(value, cst.Dict):
        return [SavedState(site, e, value) for e in value.elements
                if isinstance(e, cst.DictElement) and _is_optimizer_state(e.value, kinds)]
    if isinstance(value, cst.Call) and dotted(value.func) == "dict":
        return [SavedState(site, a, value) for a in value.args
                if a.keyword is not None and _is_optimizer_state(a.value, kinds)]
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
                and _is_optimizer_state(assign.value, kinds)):
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
