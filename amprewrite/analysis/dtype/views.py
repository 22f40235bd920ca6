"""The op table (`ops`) as each precision question asks it: by a function's qualified module
and last name, by a method's name, by an nn module's class name, by an autocast's spelling."""

from __future__ import annotations

from amprewrite.analysis.dtype.ops import (
    AUTOCAST_SPELLINGS,
    FLOAT32_NAMESPACES,
    LOW,
    LOW_DTYPES,
    OPS,
    REMOVED_LINALG,
    Cast,
    Op,
    Returns,
    Where,
)

_FUNCTIONS = frozenset({Where.TORCH, Where.FUNCTIONAL, Where.LINALG})
_METHODS = frozenset({Where.METHOD, Where.MODULE_METHOD, Where.DISTRIBUTION})
# Results that are never a low-precision floating tensor.
_NOT_LOW = frozenset({Returns.INTEGER, Returns.NUMBER, Returns.OTHER, Returns.FLOAT32,
                      Returns.COMPLEX})
_TORCH_MODULES = ("torch", "torch.nn.functional")


def _names(keep: frozenset[Where]) -> dict[str, Op]:
    return {op.name: op for op in OPS if op.where & keep}


_BY_FUNCTION = _names(_FUNCTIONS)
_BY_METHOD = _names(_METHODS)
_BY_MODULE = _names(frozenset({Where.MODULE}))


def _may_run_low(op: Op) -> bool:
    return Cast.LOW in (op.cpu, op.cuda)


# Rows, for the dtype flow ------------------------------------------------------------------
def function_op(module: str, name: str) -> Op | None:
    """The row of `torch.<name>` or `torch.nn.functional.<name>` (`module` qualified)."""
    return _BY_FUNCTION.get(name) if module in _TORCH_MODULES else None


def method_op(name: str) -> Op | None:
    """The row of the tensor (or module, or distribution) method `name`."""
    return _BY_METHOD.get(name)


def module_op(name: str) -> Op | None:
    """The row of the nn module class `name` (`Linear`)."""
    return _BY_MODULE.get(name)


# Questions of escapes (a value that may be low precision, and the uses that need float32) ----
def function_not_low(name: str) -> bool:
    """`torch.argmax`, `torch.zeros`, `torch.no_grad` (by last name, any module): a result that is
    never a low-precision tensor (creations take the default dtype)."""
    op = _BY_FUNCTION.get(name)
    return op is not None and (op.returns in _NOT_LOW or op.returns is Returns.NEW)


def method_not_low(name: str) -> bool:
    """`.argmax()`, `.item()`, `.float()`, `.state_dict()`: never a low-precision tensor."""
    op = _BY_METHOD.get(name)
    return op is not None and op.returns in _NOT_LOW


def runs_low_one_dtype(module: str, name: str) -> bool:
    """A torch (or functional) matmul or convolution: low precision under autocast (on the CPU
    or CUDA), one dtype for its inputs outside it."""
    op = _BY_FUNCTION.get(name) if module in _TORCH_MODULES else None
    return op is not None and _may_run_low(op) and op.same_dtype


def may_mix_under_autocast(module: str, name: str) -> bool:
    """A torch function whose floating inputs must share one dtype, which autocast leaves
    alone on the CPU or CUDA (`torch.lerp(norm(a), norm(b), linear(x))`): low-precision
    inputs beside float32 ones crash there."""
    op = _BY_FUNCTION.get(name) if module in _TORCH_MODULES else None
    return op is not None and op.same_dtype and Cast.NONE in (op.cpu, op.cuda)


def needs_float32(module: str, name: str) -> bool:
    """A torch function with no bfloat16 or float16 kernel on the CPU (`torch.cdist`, all of
    torch.linalg and torch.fft), or whose floating inputs must share one dtype (`torch.lerp`)."""
    if module.startswith(FLOAT32_NAMESPACES):
        return True
    op = _BY_FUNCTION.get(name) if module in _TORCH_MODULES else None
    return op is not None and (op.same_dtype or op.low_kernels != LOW)


def lacks_low_kernel(name: str) -> bool:
    """`torch.inverse`, `torch.cdist` (by last name, any module): no bfloat16 or float16 kernel
    on the CPU, or a function torch removed whose torch.linalg successor has none."""
    op = _BY_FUNCTION.get(name)
    return name in REMOVED_LINALG or (op is not None and op.low_kernels != LOW)


def values_and_indices(method: str | None) -> bool:
    """`out.max(1)`, `out.topk(5)`: values, and their indices at `[1]`."""
    op = _BY_METHOD.get(method or "")
    return op is not None and op.returns is Returns.VALUES_AND_INDICES


def receiver_dtype_source(method: str) -> int | None:
    """`t.index_add_(0, i, v)`: the position of the argument that must have the receiver's
    dtype, under autocast or not."""
    op = _BY_METHOD.get(method)
    return op.source if op is not None else None


def saturates(module: str, name: str, *, method: bool) -> bool:
    """`torch.tanh`, `F.sigmoid`, `.tanh()` (with `method`): a result that rounds to ±1 in
    low precision."""
    op = _BY_METHOD.get(name) if method else function_op(module, name)
    return op is not None and op.saturates


def returns_of(name: str, *, method: bool) -> Returns | None:
    """What the torch function (or, with `method`, the tensor method) `name` returns (by last
    name, any module)."""
    op = (_BY_METHOD if method else _BY_FUNCTION).get(name)
    return op.returns if op is not None else None


def low_cast_method(name: str) -> str | None:
    """`half` -> "float16", `bfloat16` -> "bfloat16": a method casting to a low dtype."""
    op = _BY_METHOD.get(name)
    return LOW_DTYPES[f"torch.{name}"] if op is not None and op.returns is Returns.LOW else None


# Autocast spellings -----------------------------------------------------------------------
AUTOCASTS = frozenset(spelling.name for spelling in AUTOCAST_SPELLINGS)
# torch's, whose dtype may be float16 (the CPU's defaults to bfloat16; the runtime's comes
# with its own scaler)
MAYBE_FLOAT16_AUTOCASTS = frozenset(spelling.name for spelling in AUTOCAST_SPELLINGS
                                    if not spelling.runtime and spelling.device != "cpu")
_FIXED_DEVICE = {spelling.name: spelling.device for spelling in AUTOCAST_SPELLINGS}


def fixed_device(autocast: str) -> str | None:
    """The device an autocast spelling fixes (`torch.cuda.amp.autocast`: "cuda"), else None."""
    return _FIXED_DEVICE.get(autocast)
