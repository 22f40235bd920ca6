"""Calls whose code the module does not hold, and whether they can reach a model's gradients.

Between a backward and its optimizer step, a call into another module, a star import, a
library or a callback may clip or read `.grad` where the analysis cannot see it. Such a call
is *opaque*; it is harmless only when nothing it is given can lead to the parameters (a loss
value, a number, a string, a logger). Everything else is treated as reading gradients:
`scaler.unscale_(optimizer)` before it is always correct, clamping scaled gradients never is.
"""

from __future__ import annotations

import builtins

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.forward import is_model_call
from amprewrite.analysis.kinds import Kind, KindTable, kind_from_name
from amprewrite.analysis.names import dotted, iter_keys, receiver_key
from amprewrite.analysis.statements import calls_in, is_backward_call, is_step_call

_HOLDERS = (Kind.MODEL, Kind.OPTIMIZER, Kind.SCHEDULER)
# Libraries whose functions compute values or log them, never touching a model's `.grad`
# unless handed a gradient (a `.grad` read is found on its own).
_VALUE_LIBRARIES = frozenset({
    "torch", "math", "numpy", "time", "logging", "random", "warnings", "sys", "os", "json",
    "datetime", "wandb", "tqdm", "mlflow", "tensorboardX", "pprint", "statistics",
})
# Methods that read a value or fill a plain container, whatever their receiver.
_VALUE_METHODS = frozenset({
    "item", "tolist", "detach", "cpu", "numpy", "size", "dim", "numel", "format", "join",
    "append", "extend", "get", "keys", "values", "items", "isfinite", "isnan", "synchronize",
    "zero_grad",
})
# Builtins whose result is a plain value (a number, a string, a truth value).
_SCALAR_BUILTINS = frozenset({
    "len", "float", "int", "str", "bool", "round", "abs", "sum", "min", "max", "any", "all",
    "repr", "format", "isinstance", "hasattr", "id", "type", "print", "divmod", "pow", "hash",
})
# Methods of a model or an optimizer that hand out parts of it or switch its mode.
_HOLDER_ACCESSORS = frozenset({
    "parameters", "named_parameters", "buffers", "named_buffers", "modules", "named_modules",
    "children", "named_children", "state_dict", "train", "eval", "to", "cuda", "cpu",
    "add_param_group",
})
_BUILTINS = frozenset(dir(builtins))
_PARAMETER_METHODS = frozenset({"parameters", "named_parameters", "param_groups"})


class GradientReach:
    """Which keys of a module may lead to a model's parameters (and so to their `.grad`)."""

    def __init__(self, facts: ModuleFacts, kinds: KindTable) -> None:
        self.facts = facts
        self.kinds = kinds
        self._local = {f.name.value for f in facts.functions} | {c.name.value
                                                                 for c in facts.classes}
        self._values: dict[str, list[cst.BaseExpression]] = {}
        for binding in facts.bindings:
            for key in binding.keys:
                self._values.setdefault(key, []).append(binding.value)
        for loop in facts.loops:
            for key in iter_keys(loop.target):
                self._values.setdefault(key, []).append(loop.iter)
        self._parameters = {name for function in facts.functions
                            for names in facts.parameters(function) for name in names}
        self._memo: dict[str, bool] = {}

    def opaque_call(self, statement: cst.CSTNode) -> cst.Call | None:
        """The first call in `statement` that the analysis cannot see into and that is given
        something leading to the parameters, else None."""
        for call in calls_in(statement):
            if self._opaque(call) and self._call_reaches(call):
                return call
        return None

    def _opaque(self, call: cst.Call) -> bool:
        if is_backward_call(call) or is_step_call(call) or is_model_call(call, self.kinds):
            return False
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value in _VALUE_METHODS:
            return False
        name = dotted(func)
        if name is not None and name.removeprefix("self.") in self._local and (
                "." not in name.removeprefix("self.")):
            return False  # a function of this module: read by the `.grad` analysis itself
        resolved = self.facts.imports.resolve(func)
        if resolved is not None:
            return resolved.split(".", 1)[0] not in _VALUE_LIBRARIES
        if name in _BUILTINS and name not in self._values:
            return False
        if not isinstance(func, cst.Attribute):
            return True
        kind = self.kinds.of_expr(func.value)
        return kind is not Kind.CRITERION and not (
            kind in _HOLDERS and func.attr.value in _HOLDER_ACCESSORS)

    def _call_reaches(self, call: cst.Call) -> bool:
        func = call.func
        name = dotted(func)
        if name is not None and "." not in name and name not in self._values and (
                name not in self.facts.imports.aliases):
            return True  # from a star import: its module may hold the model itself
        if isinstance(func, cst.Attribute) and self.reaches(func.value):
            return True
        return any(self.reaches(arg.value) for arg in call.args)

    def reaches(self, node: cst.BaseExpression) -> bool:
        """`node` may evaluate to something that holds a model's parameters."""
        if isinstance(node, cst.Call):
            return self._result_reaches(node)
        key = receiver_key(node)
        if key is not None:
            return self._key_reaches(key)
        if isinstance(node, cst.BaseNumber | cst.BaseString | cst.BinaryOperation
                      | cst.UnaryOperation | cst.Comparison | cst.BooleanOperation):
            return False
        if isinstance(node, cst.Lambda):
            return True
        return any(self._key_reaches(k) for k in _outer_keys(node)) or any(
            self._result_reaches(c) for c in calls_in(node))

    def _key_reaches(self, key: str) -> bool:
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = False  # a cycle of bindings adds nothing
        self._memo[key] = result = self._key_reaches_uncached(key)
        return result

    def _key_reaches_uncached(self, key: str) -> bool:
        if "[" in key:  # `batch[0]`, `optimizers[i]`: what the container holds
            return self._key_reaches(key.split("[", 1)[0])
        root, _, _ = key.partition(".")
        last = key.rsplit(".", 1)[-1]
        if root in ("self", "cls") or "param" in last or "grad" in last:
            return True
        if self.kinds.of(key) in _HOLDERS or kind_from_name(key, _HOLDERS) is not None:
            return True
        if self.kinds.of(key) is Kind.CRITERION:
            return False
        imported = self.facts.imports.aliases.get(root)
        if imported is not None:
            # a module (`import d2l`, a value library) leads nowhere by itself; an object
            # imported from one (`from callbacks import trainer`) may hold a model
            return imported != root and imported.split(".", 1)[0] not in _VALUE_LIBRARIES
        values = self._values.get(key)
        if values is None and "." in key:
            return self._key_reaches(key.rsplit(".", 1)[0])
        if values is None:
            # a parameter the analysis cannot follow, or a name from a star import
            return root in self._parameters or root not in _BUILTINS
        return any(self.reaches(value) for value in values)

    def _result_reaches(self, call: cst.Call) -> bool:
        """What `call` returns may hold parameters: a built object given them, a list of
        `model.parameters()`, a module or optimizer, what an unknown builder returns."""
        func = call.func
        if self.kinds.kind_of_value(call) in _HOLDERS:
            return True
        if isinstance(func, cst.Attribute) and func.attr.value in _PARAMETER_METHODS:
            return True
        if is_model_call(call, self.kinds):
            return False  # a forward pass returns values
        name = dotted(func)
        if name in _SCALAR_BUILTINS:
            return False
        resolved = self.facts.imports.resolve(func)
        if resolved is not None and resolved.split(".", 1)[0] in _VALUE_LIBRARIES:
            return any(self.reaches(arg.value) for arg in call.args
                       if not isinstance(arg.value, cst.Call))
        if isinstance(func, cst.Attribute) and func.attr.value in _VALUE_METHODS:
            return False
        return any(self.reaches(arg.value) for arg in call.args)


def _outer_keys(node: cst.CSTNode) -> list[str]:
    """The maximal keys read in `node` (`a.b` without `a`), calls' own keys excluded."""
    keys = list(iter_keys(node))
    return [k for k in keys if not any(other.startswith(k + ".") for other in keys)]
