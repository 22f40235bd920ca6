"""Which expressions hold a model's output: `netD(x)`, arithmetic, indexing and tensor
methods on one, the names assigned one in their scope, the returns of the file's functions, a
parameter every call is handed one for.

A backward seeded with a gradient (`errD_real.backward(mone)`) is scaled when its tensor is
one of these: `scaler.scale(out).backward(seed)` is valid for any tensor.
"""

from __future__ import annotations

import libcst as cst

from amprewrite.analysis.facts import Binding, ModuleFacts
from amprewrite.analysis.forward import is_model_call
from amprewrite.analysis.kinds import KindTable
from amprewrite.analysis.names import dotted, receiver_key, walk


def holds_model_output(
    value: cst.BaseExpression, function: cst.FunctionDef | None, facts: ModuleFacts,
    kinds: KindTable,
) -> bool:
    """`value`, read in `function` (None: at module level), is a model's output."""
    return _Scope(function, facts, kinds).holds(value, frozenset(), True)


class _Scope:
    """Which expressions of one function hold a model's output (its keys by their
    assignments in the function's scope)."""

    def __init__(
        self, function: cst.FunctionDef | None, facts: ModuleFacts, kinds: KindTable
    ) -> None:
        self.function, self.facts, self.kinds = function, facts, kinds

    def holds(self, value: cst.BaseExpression, seen: frozenset[str], assume: bool) -> bool:
        """A model's output, or arithmetic, indexing and tensor methods on one
        (`netD(x).mean(0).view(1)`, `-critic[0]`), through the names that hold one. A key
        in `seen` (being decided) counts as `assume`."""
        if isinstance(value, cst.BinaryOperation):
            return self.holds(value.left, seen, assume) or self.holds(value.right, seen, assume)
        if isinstance(value, cst.UnaryOperation):
            return self.holds(value.expression, seen, assume)
        if isinstance(value, cst.Subscript):
            return self.holds(value.value, seen, assume)
        if isinstance(value, (cst.Name, cst.Attribute)):
            key = receiver_key(value)
            if key is None:
                return False
            return assume if key in seen else self._key_holds(key, seen)
        if not isinstance(value, cst.Call):
            return False
        if is_model_call(value, self.kinds):
            return True
        callee = self._local_function(value.func)
        if callee is not None:
            return self._returns_output(callee, seen, assume)
        return isinstance(value.func, cst.Attribute) and self.holds(
            value.func.value, seen, assume)

    def _local_function(self, func: cst.BaseExpression) -> cst.FunctionDef | None:
        """The module's function `critic(...)`, or the method `self.critic(...)` of the
        function's class."""
        name = dotted(func)
        facts = self.facts
        if name is not None and name.startswith("self.") and self.function is not None:
            cls = facts.function_class.get(self.function)
            return None if cls is None else facts.method(cls, name.removeprefix("self."))
        return next((f for f in facts.functions if f.name.value == name
                     and f not in facts.function_class), None)

    def _returns_output(
        self, function: cst.FunctionDef, seen: frozenset[str], assume: bool
    ) -> bool:
        """Every `return` of `function` gives a model output (`def critic(x): return
        netD(x).mean()`)."""
        tag = f"<{function.name.value}>"
        if tag in seen:
            return assume
        values = [n.value for n in walk(function.body) if type(n) is cst.Return]
        if not values or any(v is None for v in values):
            return False
        inner = frozenset(k for k in seen if k.startswith("<")) | {tag}
        scope = _Scope(function, self.facts, self.kinds)
        return all(scope.holds(v, inner, assume) for v in values if v is not None)

    def _key_holds(self, key: str, seen: frozenset[str]) -> bool:
        """Every assignment of `key` the function may read makes a model output (`errD_real =
        netD(real)`, then `errD_real = errD_real.mean(0).view(1)`), one of them without
        counting on `key` itself."""
        values = [b.value for b in self._bindings(key)]
        if not values:
            return self._parameter_holds(key, seen)
        inner = seen | {key}
        return all(self.holds(v, inner, True) for v in values) and any(
            self.holds(v, inner, False) for v in values)

    def _bindings(self, key: str) -> list[Binding]:
        """The assignments of `key` the function may read: its own; for `self.x`, those of
        every method of its class; for a name it neither assigns nor takes, the module's.
        None when one of them also binds other keys (`d, aux = ...`, not followed)."""
        facts, function = self.facts, self.function
        own = [b for b in facts.bindings if key in b.keys]
        if key.startswith("self.") and function is not None:
            cls = facts.function_class.get(function)
            scoped = [b for b in own if b.function is not None
                      and facts.function_class.get(b.function) is cls]
        else:
            scoped = [b for b in own if b.function is function]
            positional, keyword_only = ([], []) if function is None else facts.parameters(
                function)
            if not scoped and function is not None and key.split(".", 1)[0] not in (
                    *positional, *keyword_only):
                scoped = [b for b in own if b.function is None]
        return [] if any(b.keys != (key,) for b in scoped) else scoped

    def _parameter_holds(self, key: str, seen: frozenset[str]) -> bool:
        """`def critic_backward(out, seed): out.backward(seed)`: the function is called, and
        every call passes a model output for the parameter `key`."""
        function, facts = self.function, self.facts
        if function is None or key in seen:
            return False
        positional, keyword_only = facts.parameters(function)
        if key not in (*positional, *keyword_only):
            return False
        name = function.name.value
        method = function in facts.function_class
        arguments = []
        for site in facts.calls:
            func = site.call.func
            if not (isinstance(func, cst.Attribute) and func.attr.value == name if method
                    else isinstance(func, cst.Name) and func.value == name):
                continue  # (a method's calls on any receiver: all must pass an output)
            argument = _argument(site.call, key, positional)
            if argument is None:
                return False
            arguments.append((site.function, argument))
        inner = frozenset(k for k in seen if k.startswith("<")) | {key}
        return bool(arguments) and all(
            _Scope(caller, facts, self.kinds).holds(argument, inner, False)
            for caller, argument in arguments)


def _argument(
    call: cst.Call, parameter: str, positional: list[str]
) -> cst.BaseExpression | None:
    """What `call` passes for `parameter`, by keyword or by position (None after a `*args`)."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == parameter:
            return arg.value
    plain = []
    for arg in call.args:
        if arg.star:
            return None
        if arg.keyword is None:
            plain.append(arg.value)
    index = positional.index(parameter) if parameter in positional else len(plain)
    return plain[index] if index < len(plain) else None
