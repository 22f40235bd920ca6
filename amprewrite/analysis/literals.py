"""Numeric constants written in source, and whether float16 can hold them.

A constant is any expression that evaluates to a number without running the script: `1e9`,
`-1e9`, `-10**9`, `1_000_000`, `float("-1e9")`, `-1 * 2**31`, `torch.finfo(torch.float32).min`,
or a module-level name bound to one once (`NEG_INF = -1e9`).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts

FLOAT16_MAX = 65504.0
FLOAT16_TINY = 2.0**-14  # smallest normal float16, about 6.1e-5
FLOAT16_SMALLEST = 2.0**-24  # smallest subnormal, about 6e-8: anything below rounds to zero

_BINARY: dict[type[cst.BaseBinaryOp], Callable[[float, float], float]] = {
    cst.Add: operator.add,
    cst.Subtract: operator.sub,
    cst.Multiply: operator.mul,
    cst.Divide: operator.truediv,
    cst.Power: operator.pow,
}


def numeric_value(
    node: cst.BaseExpression, names: Mapping[str, float] | None = None
) -> float | None:
    """The number `node` evaluates to, or None when it is not a constant (or not finite-
    computable: `10**10000` is None rather than a hang)."""
    if isinstance(node, cst.Integer | cst.Float):
        return float(node.evaluated_value)
    if isinstance(node, cst.Name):
        return None if names is None else names.get(node.value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus | cst.Plus):
        value = numeric_value(node.expression, names)
        if value is None:
            return None
        return -value if isinstance(node.operator, cst.Minus) else value
    if isinstance(node, cst.BinaryOperation) and type(node.operator) in _BINARY:
        left, right = numeric_value(node.left, names), numeric_value(node.right, names)
        if left is None or right is None:
            return None
        if isinstance(node.operator, cst.Power) and (abs(right) > 4096 or left < 0 < right % 1):
            return None
        try:
            return _BINARY[type(node.operator)](left, right)
        except (ArithmeticError, ValueError):
            return None
    if isinstance(node, cst.Attribute):
        return _finfo_limit(node)
    if (isinstance(node, cst.Call) and isinstance(node.func, cst.Name)
            and node.func.value in ("float", "int") and len(node.args) == 1):
        argument = node.args[0].value
        if isinstance(argument, cst.SimpleString):
            try:
                return float(argument.evaluated_value)
            except (TypeError, ValueError):
                return None
        return numeric_value(argument, names)
    return None


# The limits of the wide float types, by the names torch and numpy give them.
_FINFO_MAX = {"float32": 3.4028234663852886e38, "float": 3.4028234663852886e38,
              "single": 3.4028234663852886e38, "float64": 1.7976931348623157e308,
              "double": 1.7976931348623157e308, "bfloat16": 3.3895313892515355e38}


def _finfo_limit(node: cst.Attribute) -> float | None:
    """`torch.finfo(torch.float32).min`, `np.finfo(np.float64).max`, `torch.finfo().max`: a
    fixed wide type's limit (`torch.finfo(x.dtype).min` depends on `x`: not a constant)."""
    call = node.value
    if node.attr.value not in ("min", "max") or not (
            isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
            and call.func.attr.value == "finfo" and len(call.args) <= 1):
        return None
    if call.args:
        dtype = call.args[0].value
        name = dtype.attr.value if isinstance(dtype, cst.Attribute) else None
        if name not in _FINFO_MAX:
            return None
    else:
        name = "float32"  # torch.finfo() is the default dtype's
    limit = _FINFO_MAX[name]
    return -limit if node.attr.value == "min" else limit


def module_constants(facts: ModuleFacts) -> dict[str, float]:
    """Module-level names bound exactly once, to a numeric constant (`NEG_INF = -1e9`)."""
    values: dict[str, float | None] = {}
    for binding in facts.bindings:
        if binding.function is not None or len(binding.keys) != 1:
            continue
        key = binding.keys[0]
        values[key] = None if key in values else numeric_value(binding.value)
    return {key: value for key, value in values.items() if value is not None}


def overflows_float16(value: float) -> bool:
    """float16 cannot hold it: filling a float16 tensor with it raises (infinities are fine)."""
    return math.isfinite(value) and abs(value) > FLOAT16_MAX


def underflows_float16(value: float) -> bool:
    """A nonzero value below float16's smallest normal: it loses precision or becomes zero."""
    return 0 < abs(value) < FLOAT16_TINY
