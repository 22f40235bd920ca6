"""`torch.autograd.Function` subclasses: their forward/backward need AMP decorators."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.names import walk

_FUNCTION_BASES = frozenset({"torch.autograd.Function", "torch.autograd.function.Function"})
# Operations that must see float32 inputs: the forward then casts its inputs (cast_inputs).
_FLOAT32_PREFIXES = ("torch.linalg.", "torch.fft.")
_FLOAT32_OPS = frozenset({"inverse", "det", "logdet", "slogdet", "cholesky", "svd", "qr",
                          "eig", "symeig", "solve", "lstsq", "matrix_exp", "pinverse"})


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
    for node in walk(function):
        if isinstance(node, cst.Call):
            name = facts.imports.resolve(node.func) or ""
            if name.startswith(_FLOAT32_PREFIXES) or name.rsplit(".", 1)[-1] in _FLOAT32_OPS:
                return True
    return False
