"""`torch.autograd.Function` subclasses: their forward/backward need AMP decorators."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amprewrite.analysis.dtype import views
from amprewrite.analysis.dtype.ops import FLOAT32_NAMESPACES
from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.names import walk

_FUNCTION_BASES = frozenset({"torch.autograd.Function", "torch.autograd.function.Function"})


@dataclass(frozen=True)
class CustomFunction:
    """A `torch.autograd.Function` subclass whose forward and backward need AMP decorators."""

    cls: cst.ClassDef
    forward: cst.FunctionDef
    backward: cst.FunctionDef | None
    needs_float32: bool  # the forward calls an op that requires float32 inputs


def custom_functions(facts: ModuleFacts) -> list[CustomFunction]:
    found = []
    for cls in facts.classes:
        if not any(facts.imports.resolve(base.value) in _FUNCTION_BASES for base in cls.bases):
            continue
        methods = {
            f.name.value: f for f in facts.functions
            if facts.function_class.get(f) is cls and f.name.value in ("forward", "backward")
        }
        if "forward" in methods:
            forward = methods["forward"]
            found.append(CustomFunction(cls, forward, methods.get("backward"),
                                        _needs_float32(forward, facts)))
    return found


def _needs_float32(function: cst.FunctionDef, facts: ModuleFacts) -> bool:
    """The forward calls an op with no low-precision kernel: it then casts its inputs
    (`cast_inputs=torch.float32`)."""
    for node in walk(function):
        if isinstance(node, cst.Call):
            module, _, name = (facts.imports.resolve(node.func) or "").rpartition(".")
            if module.startswith(FLOAT32_NAMESPACES) or views.lacks_low_kernel(name):
                return True
    return False
