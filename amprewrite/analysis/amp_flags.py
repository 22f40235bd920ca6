"""The flag a script's own mixed precision sits behind: `if args.amp:` around the scaler and
the autocast, `enabled=use_amp`, `enabled=not args.noamp`, `partial(...) if args.amp else
suppress`. Every grad scaler and every autocast the script enters must be behind the same
flag, and the flag tells, where it can be read (an argparse option's default, a module
constant), whether the script trains in FP32 by default.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amprewrite.analysis.autocast_values import AutocastValues
from amprewrite.analysis.facts import CallSite, ModuleFacts, Statement
from amprewrite.analysis.names import dotted
from amprewrite.analysis.tree import descendants

Gate = tuple[str, bool]  # a flag's key, and whether AMP is on when it is true


@dataclass(frozen=True)
class AmpFlag:
    """The flag that turns a script's own mixed precision on (or off)."""

    key: str  # `args.amp`, `use_amp`
    on_when_true: bool  # `if args.amp:`; False for `enabled=not args.noamp`
    node: cst.CSTNode  # where it first gates it (the `if` test, the `enabled=` value)
    option: str | None  # `--amp`, the command-line option setting it, when one does
    default: bool | None  # the flag's value when not given, where it can be told

    @property
    def on_by_default(self) -> bool | None:
        return None if self.default is None else self.default == self.on_when_true


def amp_flag(facts: ModuleFacts, autocasts: AutocastValues) -> AmpFlag | None:
    """The one flag every scaler and autocast of the module is behind, or None."""
    effects: list[dict[Gate, cst.CSTNode]] = []
    for site in facts.calls:
        resolved = facts.imports.resolve(site.call.func) or ""
        if resolved.startswith("torch.") and resolved.rsplit(".", 1)[-1] in (
                "GradScaler", "ShardedGradScaler"):
            effects.append(gates_of(site.call, site.statement, facts))
    sources = {id(source): source for source in autocasts.unfollowed}
    for entry in autocasts.entries:
        entered = gates_of(entry.node, entry.statement, facts)
        built = [s for s in entry.sources if id(s) not in sources]
        if built:
            shared = common_gates([gates_of(s, facts.statements_around(s)[0], facts)
                                   for s in built])
            entered = {**shared, **entered}
        effects.append(entered)
    effects.extend(gates_of(s, facts.statements_around(s)[0], facts) for s in sources.values())
    if not effects:
        return None
    common = common_gates(effects)
    if not common:
        return None
    (key, on_when_true), node = min(common.items(), key=lambda item: _order(item[1], facts))
    option, default = _default(key, facts)
    return AmpFlag(key, on_when_true, node, option, default)


def common_gates(found: list[dict[Gate, cst.CSTNode]]) -> dict[Gate, cst.CSTNode]:
    """The gates all of them share (where each first applies, the earliest kept)."""
    shared = dict(found[0]) if found else {}
    for other in found[1:]:
        shared = {gate: node for gate, node in shared.items() if gate in other}
    return shared


def _order(node: cst.CSTNode, facts: ModuleFacts) -> int:
    around = facts.statements_around(node)
    return facts.order.get(around[0], 0) if around else 0


def gates_of(node: cst.CSTNode, statement: Statement, facts: ModuleFacts, depth: int = 0
             ) -> dict[Gate, cst.CSTNode]:
    """The flags that must hold for `node` (in `statement`) to run, or to be on: an
    `enabled=` argument, the arm of a conditional expression, the `if`s around it, and
    those every call of its function in the module is behind."""
    found: dict[Gate, cst.CSTNode] = {}
    if isinstance(node, cst.Call):
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == "enabled":
                found.update(_flags(arg.value, True))
    for inner in _header(statement):
        if isinstance(inner, cst.IfExp):
            if any(n is node for n in descendants(inner.body)):
                found.update(_flags(inner.test, True))
            elif any(n is node for n in descendants(inner.orelse)):
                found.update(_flags(inner.test, False))
    current = statement
    for outer in facts.enclosing_statements(statement)[1:]:
        if isinstance(outer, cst.FunctionDef | cst.ClassDef):
            break
        if isinstance(outer, cst.If):
            in_body = facts.statements[current].block is outer.body
            found.update(_flags(outer.test, in_body))
        current = outer
    function = facts.statements[statement].function
    if function is not None and depth < _CALLERS_FOLLOWED:  # it runs where it is called
        callers = [gates_of(site.call, site.statement, facts, depth + 1)
                   for site in _callers(function, facts)]
        found = {**common_gates(callers), **found}
    return found


_CALLERS_FOLLOWED = 3


def _callers(function: cst.FunctionDef, facts: ModuleFacts) -> list[CallSite]:
    """The module's calls of `function`: by its name, as `self.name()` for a method, by its
    class's name for an `__init__`."""
    cls = facts.function_class.get(function)
    names = {function.name.value} if cls is None else {f"self.{function.name.value}"}
    if cls is not None and function.name.value == "__init__":
        names = {cls.name.value}
    return [site for site in facts.calls if dotted(site.call.func) in names]


def _header(statement: Statement) -> list[cst.CSTNode]:
    """The nodes of `statement` outside its body: a line, a `with`'s items, decorators."""
    if isinstance(statement, cst.SimpleStatementLine):
        return list(descendants(statement))
    if isinstance(statement, cst.With):
        return [node for item in statement.items for node in descendants(item)]
    if isinstance(statement, cst.FunctionDef):
        return [node for d in statement.decorators for node in descendants(d)]
    return []


def _flags(test: cst.BaseExpression, holds: bool) -> dict[Gate, cst.CSTNode]:
    """The flags `test` being `holds` requires: `args.amp`, `not args.noamp`, each operand
    of an `and` that must hold (of an `or` that must not)."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _flags(test.expression, not holds)
    if isinstance(test, cst.BooleanOperation):
        if isinstance(test.operator, cst.And) == holds:  # `a and b` true, `a or b` false
            return {**_flags(test.left, holds), **_flags(test.right, holds)}
        return {}
    key = dotted(test) if isinstance(test, cst.Name | cst.Attribute) else None
    if key is None or key in ("True", "False", "None"):
        return {}
    return {(key, holds): test}


def option_of(key: str, facts: ModuleFacts) -> str | None:
    """The command-line option that sets `key` (`--use-amp` for `args.use_amp`), if one does."""
    return _default(key, facts)[0]


def _default(key: str, facts: ModuleFacts) -> tuple[str | None, bool | None]:
    """The command-line option setting `key` (`args.use_amp` from `--use-amp`) and its
    default, or a module constant's value (`use_amp = False`)."""
    head, _, attribute = key.rpartition(".")
    if head and _parsed(head, facts):
        for site in facts.calls:
            func = site.call.func
            if isinstance(func, cst.Attribute) and func.attr.value == "add_argument":
                option = _option(site.call, attribute)
                if option is not None:
                    return option, _argument_default(site.call)
        return None, None
    values = [b.value for b in facts.bindings if b.keys == (key,)]
    if len(values) == 1 and isinstance(values[0], cst.Name) and values[0].value in (
            "True", "False"):
        return None, values[0].value == "True"
    return None, None


def _parsed(head: str, facts: ModuleFacts) -> bool:
    """`head` holds parsed command-line arguments: `args = parser.parse_args()`."""
    return any(b.keys == (head,) and isinstance(b.value, cst.Call)
               and isinstance(b.value.func, cst.Attribute)
               and b.value.func.attr.value in ("parse_args", "parse_known_args")
               for b in facts.bindings)


def _option(call: cst.Call, dest: str) -> str | None:
    """The option string of `add_argument("--use-amp", ...)` when it sets `dest`."""
    names = [a.value.evaluated_value for a in call.args if a.keyword is None
             and isinstance(a.value, cst.SimpleString)]
    strings = [n for n in names if isinstance(n, str)]
    explicit = next((a.value.evaluated_value for a in call.args if a.keyword is not None
                     and a.keyword.value == "dest" and isinstance(a.value, cst.SimpleString)),
                    None)
    longs = [n for n in strings if n.startswith("--")]
    implied = (longs or strings or [""])[0].lstrip("-").replace("-", "_")
    if (explicit if explicit is not None else implied) != dest:
        return None
    return longs[0] if longs else (strings[0] if strings else None)


def _argument_default(call: cst.Call) -> bool | None:
    """The truth of an option's value when it is not given (argparse's rules)."""
    keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    default = keywords.get("default")
    if default is not None:
        if isinstance(default, cst.Name) and default.value in ("True", "False", "None"):
            return default.value == "True"
        if isinstance(default, cst.Integer | cst.SimpleString):
            return bool(default.evaluated_value)
        return None
    action = keywords.get("action")
    if isinstance(action, cst.SimpleString):
        return action.evaluated_value == "store_false"
    return False  # no default: None
