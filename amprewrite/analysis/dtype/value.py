"""A value's precision as the flow knows it: the dtypes it may have on each device, whether it
is a list or dict of tensors, and whether it may be an integer tensor.

The dtypes are a set, kept as bits so joining is an `|`: what autocast made low precision, what
the program cast to a low dtype itself (`.half()`), float32, and unknown (no evidence either way:
a parameter, an unfollowed call). An empty set is a Python number, which takes the dtype of the
tensor it meets. A binary op's result may have either operand's dtype (a 0-dim float32 tensor
times a bfloat16 matrix is bfloat16), so results join their inputs rather than promote them.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

# The dtype bits.
AUTOCAST_LOW = 1  # bfloat16/float16 because autocast made it so: a rewrite must cast it back
FLOAT32 = 2  # float32 (or another dtype autocast leaves alone)
UNKNOWN = 4
CAST_LOW = 8  # bfloat16/float16 by the program's own cast: it was low before any rewrite
_LOW_BITS = AUTOCAST_LOW | CAST_LOW


class Precision(str, Enum):
    """A value's precision on one device, as one answer."""

    SCALAR = "scalar"  # a Python number: it takes the tensor's dtype
    LOW = "low"  # certainly float16/bfloat16
    FLOAT32 = "float32"  # certainly float32 (or another dtype autocast leaves alone)
    UNKNOWN = "unknown"


def _precision(bits: int) -> Precision:
    if not bits:
        return Precision.SCALAR
    if not bits & ~_LOW_BITS:
        return Precision.LOW
    return Precision.FLOAT32 if bits == FLOAT32 else Precision.UNKNOWN


class Value(NamedTuple):
    """What an expression may evaluate to."""

    cpu: int  # dtype bits under the CPU's autocast (or none)
    cuda: int  # dtype bits under CUDA's
    container: bool = False  # a list or dict of such tensors
    integer: bool = False  # may be an integer tensor (a categorical's sample)

    @property
    def low(self) -> bool:
        """Whether autocast may have made it low precision on either device."""
        return bool((self.cpu | self.cuda) & AUTOCAST_LOW)

    def on_cuda(self) -> Precision:
        """Its precision under CUDA autocast, where float16 is the default low dtype."""
        return _precision(self.cuda)

    def join(self, other: Value) -> Value:
        """What either of the two may be."""
        return Value(self.cpu | other.cpu, self.cuda | other.cuda,
                     self.container or other.container, self.integer or other.integer)

    def with_dtype(self, bits: int) -> Value:
        """The same value with dtype `bits` on both devices (a cast)."""
        return Value(bits, bits, self.container, self.integer)


def join_all(values: list[Value]) -> Value:
    """What any of `values` may be; a Python number for none."""
    cpu = cuda = 0
    container = integer = False
    for value in values:
        cpu, cuda = cpu | value.cpu, cuda | value.cuda
        container, integer = container or value.container, integer or value.integer
    return Value(cpu, cuda, container, integer)


SCALAR_VALUE = Value(0, 0)
UNKNOWN_VALUE = Value(UNKNOWN, UNKNOWN)
FLOAT32_VALUE = Value(FLOAT32, FLOAT32)
LOW_VALUE = Value(AUTOCAST_LOW, AUTOCAST_LOW)  # certainly low under autocast
MAYBE_LOW_VALUE = Value(AUTOCAST_LOW | UNKNOWN, AUTOCAST_LOW | UNKNOWN)  # a model's output
