"""The autocasts a script builds and where it enters them, in every spelling.

An autocast is entered where it is built (`with torch.autocast("cuda"):`, a decorator) or
through a value: kept in a variable or attribute (`ctx = torch.autocast(...)`, `self.autocast =
...`, `with ctx:`), made by a factory (`amp_autocast = partial(torch.autocast, dtype=...)`,
`with amp_autocast():`; a lambda, a function returning one, a `@contextmanager` entering one),
chosen against an FP32 arm (`nullcontext() if cpu else torch.autocast(...)`, `amp_autocast =
suppress`), or handed to a function's parameter by a call in the module. Keys, not scopes:
every assignment of a key counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis.dtype.ops import LOW_DTYPES
from amprewrite.analysis.dtype.views import AUTOCASTS
from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.names import dotted, walk

_PARTIALS = frozenset({"functools.partial"})
_CONTEXT_MANAGERS = frozenset({"contextlib.contextmanager"})
CONTEXT, FACTORY = "context", "factory"  # an autocast; something that makes one when called


@dataclass(frozen=True)
class AutocastEntry:
    """A `with` item (or a decorator) entering an autocast the script built."""

    statement: cst.With | cst.FunctionDef
    node: cst.BaseExpression  # the item or decorator
    dtype: str | None  # "bfloat16"/"float16" where every autocast it may be names that one
    sources: tuple[cst.CSTNode, ...]  # the autocast calls (or partials) it may enter


@dataclass
class AutocastValues:
    entries: list[AutocastEntry] = field(default_factory=list)
    # autocasts built where no entry is seen: `.__enter__()`, `stack.enter_context(...)`,
    # a value never entered in this module
    unfollowed: list[cst.CSTNode] = field(default_factory=list)


def mentions_autocast(facts: ModuleFacts) -> bool:
    """Whether the module can name an autocast at all (a cheap test before the walk)."""
    return "autocast" in facts.names or any(
        target in AUTOCASTS for target in facts.imports.aliases.values())


def autocast_values(facts: ModuleFacts) -> AutocastValues:
    found = AutocastValues()
    if not mentions_autocast(facts):
        return found
    values = _Values(facts)
    reached: set[int] = set()
    for statement, item in _entered(facts):
        if values.kind(item) == CONTEXT:
            sources = values.sources(item)
            reached.update(id(source) for source in sources)
            dtypes = {_dtype(source, facts) for source in sources}
            found.entries.append(AutocastEntry(
                statement, item, dtypes.pop() if len(dtypes) == 1 else None, tuple(sources)))
    found.unfollowed = [source for source in values.all_sources() if id(source) not in reached]
    return found


def _entered(facts: ModuleFacts) -> list[tuple[cst.With | cst.FunctionDef, cst.BaseExpression]]:
    entered: list[tuple[cst.With | cst.FunctionDef, cst.BaseExpression]] = []
    for statement in facts.statements:
        if isinstance(statement, cst.With):
            entered.extend((statement, item.item) for item in statement.items)
        elif isinstance(statement, cst.FunctionDef):
            entered.extend((statement, d.decorator) for d in statement.decorators)
    return entered


class _Values:
    """What each key holds (an autocast, a factory of one), from the module's assignments,
    functions and calls, to a fixed point."""

    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self.keys: dict[str, str] = {}
        self.values: dict[str, list[cst.BaseExpression]] = {}  # the autocasts each key is given
        given = [(b.keys[0], b.value) for b in facts.bindings if len(b.keys) == 1]
        given += self._arguments()
        returned = self._returns()
        for _ in range(8):  # a chain a few keys long; stop where nothing changes
            before = dict(self.keys)
            for key, value, kind in [*((k, v, self.kind(v)) for k, v in given),
                                     *((k, v, _made(self.kind(v))) for k, v in returned)]:
                if kind is not None:
                    self.keys[key] = FACTORY if FACTORY in (kind, self.keys.get(key)) else kind
                    if not any(value is v for v in self.values.setdefault(key, [])):
                        self.values[key].append(value)
            for key in self._context_managers():
                self.keys[key] = FACTORY
            if self.keys == before:
                break

    def kind(self, node: cst.BaseExpression) -> str | None:
        kind = type(node)
        if kind is cst.Call:
            assert isinstance(node, cst.Call)
            resolved = self.facts.imports.resolve(node.func)
            if resolved in AUTOCASTS:
                return None if turns_off(node) else CONTEXT
            if resolved in _PARTIALS:
                return FACTORY if node.args and self.kind(node.args[0].value) == FACTORY else None
            return CONTEXT if self.kind(node.func) == FACTORY else None
        if kind is cst.Name or kind is cst.Attribute:
            if self.facts.imports.resolve(node) in AUTOCASTS:
                return FACTORY
            return self.keys.get(dotted(node) or "")
        if kind is cst.IfExp:
            assert isinstance(node, cst.IfExp)
            return _either(self.kind(node.body), self.kind(node.orelse))
        if kind is cst.BooleanOperation:
            assert isinstance(node, cst.BooleanOperation)
            return _either(self.kind(node.left), self.kind(node.right))
        if kind is cst.Lambda:
            assert isinstance(node, cst.Lambda)
            return FACTORY if self.kind(node.body) == CONTEXT else None
        return None

    def sources(self, node: cst.BaseExpression) -> list[cst.CSTNode]:
        """The autocasts (calls, references, partials of them) `node` may evaluate to."""
        found: list[cst.CSTNode] = []
        seen: set[str] = set()
        pending = [node]
        while pending:
            current = pending.pop()
            for inner in walk(current):
                if self._is_source(inner):
                    found.append(inner)
                key = dotted(inner) if type(inner) in (cst.Name, cst.Attribute) else None
                if key is not None and key in self.values and key not in seen:
                    seen.add(key)
                    pending.extend(self.values[key])
        return found

    def all_sources(self) -> list[cst.CSTNode]:
        """Every autocast the module builds (not those a `with` builds in place: entered)."""
        direct = {id(item) for _, item in _entered(self.facts)}
        return [site.call for site in self.facts.calls
                if self._is_source(site.call) and id(site.call) not in direct]

    def _is_source(self, node: cst.CSTNode) -> bool:
        if type(node) is not cst.Call:
            return False
        assert isinstance(node, cst.Call)
        resolved = self.facts.imports.resolve(node.func)
        return (resolved in AUTOCASTS and not turns_off(node)) or (
            resolved in _PARTIALS and bool(node.args)
            and self.facts.imports.resolve(node.args[0].value) in AUTOCASTS)

    def _returns(self) -> list[tuple[str, cst.BaseExpression]]:
        """(the key a function is called by, a value it returns): `get_autocast`, or
        `self.get_autocast` for a method."""
        return [(self._called_as(function), node.value) for function in self.facts.functions
                for node in walk(function.body)
                if isinstance(node, cst.Return) and node.value is not None]

    def _context_managers(self) -> list[str]:
        """`@contextmanager` functions that enter an autocast."""
        found = []
        for function in self.facts.functions:
            if any(self.facts.imports.resolve(d.decorator) in _CONTEXT_MANAGERS
                   for d in function.decorators) and any(
                    isinstance(node, cst.With) and any(
                        self.kind(item.item) == CONTEXT for item in node.items)
                    for node in walk(function.body)):
                found.append(self._called_as(function))
        return found

    def _called_as(self, function: cst.FunctionDef) -> str:
        name = function.name.value
        return f"self.{name}" if function in self.facts.function_class else name

    def _arguments(self) -> list[tuple[str, cst.BaseExpression]]:
        """(a parameter of one of the module's functions or classes, what a call passes it)."""
        functions = {self._called_as(f): f for f in self.facts.functions}
        for cls in self.facts.classes:
            init = self.facts.init_of(cls)
            if init is not None:
                functions[cls.name.value] = init
        found = []
        for site in self.facts.calls:
            function = functions.get(dotted(site.call.func) or "")
            if function is None:
                continue
            positional, _ = self.facts.parameters(function)
            for index, arg in enumerate(site.call.args):
                if arg.star:
                    break
                if arg.keyword is not None:
                    found.append((arg.keyword.value, arg.value))
                elif index < len(positional):
                    found.append((positional[index], arg.value))
        return found


def _made(kind: str | None) -> str | None:
    """What calling a function that returns `kind` holds."""
    return FACTORY if kind == CONTEXT else None


def _either(one: str | None, other: str | None) -> str | None:
    """What a choice between two values holds: an autocast if either arm may be one (the
    other arm is the FP32 one, `nullcontext()`), a factory if either makes one."""
    if FACTORY in (one, other):
        return FACTORY
    return CONTEXT if CONTEXT in (one, other) else None


def turns_off(call: cst.BaseExpression) -> bool:
    """`autocast(enabled=False)`: a guard keeping code in float32, not mixed precision
    (amprewrite never writes one: O0 keeps it)."""
    return isinstance(call, cst.Call) and any(
        arg.keyword is not None and arg.keyword.value == "enabled"
        and isinstance(arg.value, cst.Name) and arg.value.value == "False" for arg in call.args)


def autocast_dtype(call: cst.Call, facts: ModuleFacts) -> str | None:
    """The low-precision dtype an autocast call names (`dtype=torch.bfloat16`, or its second
    positional argument), "bfloat16" or "float16"; None where it names none it can tell."""
    for position, arg in enumerate(call.args):
        keyword = arg.keyword.value if arg.keyword is not None else None
        if keyword == "dtype" or (keyword is None and position == 1):
            return LOW_DTYPES.get(facts.imports.resolve(arg.value) or "")
    return None


def _dtype(source: cst.CSTNode, facts: ModuleFacts) -> str | None:
    """The dtype an autocast call or a partial of one names."""
    assert isinstance(source, cst.Call)
    if facts.imports.resolve(source.func) in _PARTIALS:
        return autocast_dtype(source.with_changes(args=source.args[1:]), facts)
    return autocast_dtype(source, facts)
