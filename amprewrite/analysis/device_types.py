"""The script's own device type at a statement: `device.type` for a `torch.device`, or a
variable holding "cuda"/"cpu" (`device_type = "cuda" if torch.cuda.is_available() else
"cpu"`), where it is provably bound there; what a migration writes instead of `"cuda"`."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from amprewrite.analysis.definite_binding import bound_in_scope, bound_on_every_path
from amprewrite.analysis.facts import ModuleFacts, Statement
from amprewrite.analysis.names import dotted, target_keys, walk

_TYPES = frozenset({"cuda", "cpu"})
_DEVICE, _TYPE = "device", "type"  # a torch.device; a device-type string
Scope = cst.FunctionDef | cst.ClassDef | None  # a function's keys, a class's `self.x`, the module's
# (key, scope) -> each assignment's value, and the function it is evaluated in
Groups = dict[tuple[str, Scope], list[tuple[cst.BaseExpression, cst.FunctionDef | None]]]


def device_type_code(facts: ModuleFacts, statement: Statement) -> str | None:
    """`device.type` or `device_type`: the one key visible at `statement` that every
    assignment there makes a device (or a device type), bound on every path to it and never
    bound otherwise (a loop variable, `with ... as`, a parameter); else None. A device-type
    string wins over the `torch.device` it is taken from (`device_type = device.type`)."""
    function = facts.statements[statement].function
    groups: Groups = {}
    for binding in facts.bindings:
        for key in binding.keys:
            scope: Scope = binding.function
            if key.startswith("self.") and binding.function is not None:
                scope = facts.function_class.get(binding.function)
            value = binding.value if len(binding.keys) == 1 else cst.Ellipsis()  # unpacked
            groups.setdefault((key, scope), []).append((value, binding.function))
    kinds: dict[tuple[str, cst.FunctionDef | None], str | None] = {}

    def kind(key: str, at: cst.FunctionDef | None) -> str | None:
        """What `key` holds as the code of `at` reads it."""
        if (key, at) not in kinds:
            kinds[key, at] = None  # while it is worked out: `device = device.type` is no device
            scope = _visible(key, at, facts, groups)
            parameter = at is not None and scope is None and key in {
                name for names in facts.parameters(at) for name in names}
            found = {_kind(value, facts, reads_in(where))
                     for value, where in groups.get((key, scope), [])}
            kinds[key, at] = found.pop() if len(found) == 1 and not parameter else None
        return kinds[key, at]

    def reads_in(where: cst.FunctionDef | None) -> Callable[[str], str | None]:
        return lambda key: kind(key, where)

    tiers: list[dict[str, set[str]]] = [{_DEVICE: set(), _TYPE: set()} for _ in range(3)]
    for key in sorted({key for key, _ in groups}):
        held = kind(key, function)
        scope = _visible(key, function, facts, groups)
        if held is not None and _bound_at(key, scope, statement, function, facts):
            tier = 1 if isinstance(scope, cst.ClassDef) else 0 if scope is not None else 2
            tiers[tier][held].add(key)
    for found in tiers:  # the function's own, then its object's, then the module's
        if len(found[_TYPE]) == 1:
            return next(iter(found[_TYPE]))
        if not found[_TYPE] and len(found[_DEVICE]) == 1:
            return f"{next(iter(found[_DEVICE]))}.type"
        if found[_TYPE] or found[_DEVICE]:
            return None  # two of them: which one the call meant is not known
    return None


def _visible(key: str, function: cst.FunctionDef | None, facts: ModuleFacts,
             groups: Groups) -> Scope:
    """Whose assignments of `key` the code of `function` reads."""
    if key.startswith("self."):
        return facts.function_class.get(function) if function is not None else None
    return function if (key, function) in groups else None


def _kind(value: cst.BaseExpression, facts: ModuleFacts,
          kind: Callable[[str], str | None]) -> str | None:
    """A device, a device type or None; `kind` tells what a key holds there."""
    if isinstance(value, cst.Call) and facts.imports.resolve(value.func) == "torch.device":
        return _DEVICE
    if isinstance(value, cst.SimpleString):
        return _TYPE if value.evaluated_value in _TYPES else None
    if isinstance(value, cst.IfExp):
        arms = {_kind(value.body, facts, kind), _kind(value.orelse, facts, kind)}
        return arms.pop() if len(arms) == 1 else None
    if isinstance(value, cst.Attribute) and value.attr.value == "type":
        owner = dotted(value.value)  # `device_type = device.type`, of a torch.device
        return _TYPE if owner is not None and kind(owner) == _DEVICE else None
    key = dotted(value)  # `self.device = device`
    return kind(key) if key is not None and facts.imports.resolve(value) is None else None


def _bound_at(key: str, scope: Scope, statement: Statement, function: cst.FunctionDef | None,
              facts: ModuleFacts) -> bool:
    """`key`, assigned in `scope`, holds that value where `statement` (in `function`) runs."""
    if isinstance(scope, cst.ClassDef):  # `self.device`, assigned in `__init__` alone
        init = facts.init_of(scope)
        if init is None or any(b.function is not init for b in facts.bindings
                               if key in b.keys and facts.function_class.get(
                                   b.function) is scope):  # type: ignore[arg-type]
            return False
        if function is init:
            return bound_on_every_path(key, statement, facts)
        return bound_in_scope(key, init, facts) and not _rebound(key, init)
    if scope is not None:  # the function's own
        return bound_on_every_path(key, statement, facts) and not _rebound(key, scope)
    if function is not None and (_rebound(key, function) or key in {
            name for names in facts.parameters(function) for name in names}):
        return False
    if _rebound(key, facts.module) or key.startswith("self."):
        return False
    if function is None:
        return bound_on_every_path(key, statement, facts)
    return bound_in_scope(key, None, facts)


def _rebound(key: str, scope: cst.CSTNode) -> bool:
    """`key` is bound in `scope` other than by assignment: `for`, `with ... as`, `:=`, `+=`."""
    for node in walk(scope):
        target: cst.BaseExpression | None = None
        if isinstance(node, cst.For | cst.NamedExpr | cst.AugAssign):
            target = node.target
        elif isinstance(node, cst.WithItem) and node.asname is not None:
            target = node.asname.name
        if target is not None and key in set(target_keys(target)):
            return True
    return False
