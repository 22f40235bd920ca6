"""Which values are float16/bfloat16 under autocast, as far as the source tells.

CUDA autocast runs matmuls, convolutions and `nn.Linear` in the low-precision dtype and a
list of precision-sensitive ops (softmax, log, sum, layer_norm, ...) in float32; other ops
keep their input's dtype, and mixing a float16 with a float32 tensor gives float32 (the CUDA
column of the op table, `dtype.ops`). This follows those rules through the assignments of one
function, in source order.
"""

from __future__ import annotations

from enum import Enum

import libcst as cst

from amprewrite.analysis.dtype import views
from amprewrite.analysis.dtype.ops import LOW_DTYPES, OTHER_DTYPES, Cast, Returns
from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.kinds import Kind, KindTable
from amprewrite.analysis.names import dotted


class Precision(str, Enum):
    SCALAR = "scalar"  # a Python number: it takes the tensor's dtype
    LOW = "low"  # float16/bfloat16 under autocast
    FLOAT32 = "float32"  # float32 (or another dtype autocast leaves alone)
    UNKNOWN = "unknown"


def combine(*precisions: Precision) -> Precision:
    """The precision of an elementwise op on these operands (type promotion)."""
    tensors = [p for p in precisions if p is not Precision.SCALAR]
    if not tensors:
        return Precision.SCALAR
    for winner in (Precision.FLOAT32, Precision.UNKNOWN):
        if winner in tensors:
            return winner
    return Precision.LOW


class PrecisionTracker:
    """The precision of each key assigned so far in one scope, and of expressions over them."""

    def __init__(self, facts: ModuleFacts, kinds: KindTable) -> None:
        self.facts = facts
        self.kinds = kinds
        self.keys: dict[str, Precision] = {}

    def bind(self, line: cst.SimpleStatementLine | cst.SimpleStatementSuite, autocast: bool
             ) -> None:
        """Record what the assignments of `line` bind (call after checking the line)."""
        for small in line.body:
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    self._bind_target(target.target, small.value, autocast)
            elif isinstance(small, cst.AnnAssign) and small.value is not None:
                self._bind_target(small.target, small.value, autocast)

    def _bind_target(self, target: cst.BaseExpression, value: cst.BaseExpression,
                     autocast: bool) -> None:
        if isinstance(target, cst.Tuple | cst.List):
            values = (value.elements if isinstance(value, cst.Tuple | cst.List)
                      and len(value.elements) == len(target.elements) else None)
            for position, element in enumerate(target.elements):
                part = values[position].value if values is not None else value
                self._bind_target(element.value, part, autocast)
            return
        key = dotted(target)
        if key is not None:
            self.keys[key] = self.of(value, autocast)

    def of(self, node: cst.BaseExpression, autocast: bool) -> Precision:
        """The precision `node` evaluates to (under autocast when `autocast`)."""
        if isinstance(node, cst.Integer | cst.Float):
            return Precision.SCALAR
        if isinstance(node, cst.UnaryOperation):
            return self.of(node.expression, autocast)
        key = dotted(node)
        if key is not None:
            return self.keys.get(key, Precision.UNKNOWN)
        if isinstance(node, cst.Subscript):
            return self.of(node.value, autocast)
        if isinstance(node, cst.BinaryOperation):
            return self._binary(node, autocast)
        if isinstance(node, cst.IfExp):
            return combine(self.of(node.body, autocast), self.of(node.orelse, autocast))
        if isinstance(node, cst.Call):
            return self._call(node, autocast)
        return Precision.UNKNOWN

    def _binary(self, node: cst.BinaryOperation, autocast: bool) -> Precision:
        left, right = self.of(node.left, autocast), self.of(node.right, autocast)
        operator = node.operator
        if autocast and isinstance(operator, cst.MatrixMultiply):
            return Precision.LOW
        if autocast and (isinstance(operator, cst.Power) or (
                isinstance(operator, cst.Divide) and left is Precision.SCALAR)):
            return Precision.FLOAT32 if combine(left, right) is not Precision.SCALAR else left
        return combine(left, right)

    def _call(self, call: cst.Call, autocast: bool) -> Precision:
        func = call.func
        resolved = self.facts.imports.resolve(func)
        if resolved is not None and resolved.startswith("torch."):
            return self._torch_function(call, resolved, autocast)
        if (resolved or "").startswith("math.") or dotted(func) in ("len", "int", "float"):
            return Precision.SCALAR
        module = self._module_class(func)
        if module is not None:
            cast = views.module_cuda_cast(module)
            if autocast and cast is Cast.LOW:
                return Precision.LOW
            return Precision.FLOAT32 if cast is Cast.FLOAT32 else Precision.UNKNOWN
        if not isinstance(func, cst.Attribute) or dotted(func.value) == "self":
            return Precision.UNKNOWN  # a function or a method of the class: not followed
        return self._method(call, func.attr.value, self.of(func.value, autocast), autocast)

    def _module_class(self, func: cst.BaseExpression) -> str | None:
        """`Linear` for `self.proj` built as `nn.Linear(...)`; "" for another model."""
        key = dotted(func)
        built_by = self.kinds.constructors.get(key or "")
        if built_by is not None and built_by.startswith("torch.nn."):
            return built_by.rsplit(".", 1)[-1]
        return "" if self.kinds.of(key) is Kind.MODEL else None

    def _method(self, call: cst.Call, method: str, receiver: Precision, autocast: bool
                ) -> Precision:
        returns = views.returns_of(method, method=True)
        if returns is Returns.NUMBER:
            return Precision.SCALAR
        if returns in (Returns.FLOAT32, Returns.INTEGER):
            return Precision.FLOAT32
        if returns is Returns.LOW:
            return Precision.LOW
        if method in ("to", "type"):
            return self._dtype_argument(call) or receiver
        if method == "type_as" and call.args:
            return self.of(call.args[0].value, autocast)
        # most tensor methods keep the dtype (view, transpose, masked_fill)
        return self._autocast_class(method, autocast) or receiver

    def _torch_function(self, call: cst.Call, resolved: str, autocast: bool) -> Precision:
        name = resolved.rsplit(".", 1)[-1]
        first = call.args[0].value if call.args and call.args[0].keyword is None else None
        by_class = self._autocast_class(name, autocast)
        if by_class is not None:
            return by_class
        returns = views.returns_of(name, method=False)
        if returns is Returns.NEW:
            return self._dtype_argument(call) or Precision.FLOAT32
        if returns is Returns.LIKE and first is not None:
            return self._dtype_argument(call) or self.of(first, autocast)
        if name == "where" and len(call.args) == 3:
            return combine(self.of(call.args[1].value, autocast),
                           self.of(call.args[2].value, autocast))
        if name in ("cat", "stack") and isinstance(first, cst.List | cst.Tuple):
            return combine(*(self.of(e.value, autocast) for e in first.elements))
        if views.keeps_first(name) and first is not None:
            return self.of(first, autocast)
        return Precision.UNKNOWN

    @staticmethod
    def _autocast_class(name: str, autocast: bool) -> Precision | None:
        """LOW or FLOAT32 for an op CUDA autocast casts to one of them, under autocast."""
        cast = views.cuda_cast(name) if autocast else None
        if cast is Cast.LOW:
            return Precision.LOW
        return Precision.FLOAT32 if cast is Cast.FLOAT32 else None

    def _dtype_argument(self, call: cst.Call) -> Precision | None:
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value != "dtype":
                continue
            resolved = self.facts.imports.resolve(arg.value)
            if resolved in LOW_DTYPES:
                return Precision.LOW
            if resolved in OTHER_DTYPES:
                return Precision.FLOAT32
        return None
