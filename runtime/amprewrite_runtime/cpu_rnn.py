"""LSTMs under CPU autocast where oneDNN has no low-precision LSTM kernel: run them in float32.

On the CPU, `nn.LSTM` takes oneDNN's path for a float32 input, and autocast then casts that
path's op (`aten::mkldnn_rnn_layer`) to bfloat16/float16. oneDNN builds low-precision LSTM
primitives only on CPUs with native support (AVX512-BF16, AMX); elsewhere (an AVX2 machine)
every LSTM forward under autocast raises "could not create a primitive descriptor for the LSTM
forward propagation primitive", in bfloat16 and in float16 alike. On such CPUs the first
autocast region replaces autocast's kernel for that op with one that runs it in float32
unless oneDNN supports the region's dtype (GRU and RNN never take that path: float32 already).
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import torch

_OP = "mkldnn_rnn_layer"
_prepared = False
_library: torch.library.Library | None = None  # keeps the registration alive


def prepare(dtype: torch.dtype) -> None:
    """Called as a CPU autocast region in `dtype` opens; registers the kernel when needed."""
    global _prepared, _library
    if _prepared or onednn_supports(dtype):
        return
    _prepared = True
    if not torch.backends.mkldnn.is_available():
        return
    library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():  # "Overriding a previously registered kernel"
        warnings.simplefilter("ignore")
        library.impl(_OP, _rnn_layer_in_supported_dtype, "AutocastCPU")
    _library = library


@functools.cache
def onednn_supports(dtype: torch.dtype) -> bool:
    """Whether this CPU's oneDNN has kernels for `dtype` (float32 always has)."""
    checks = {torch.bfloat16: "_is_mkldnn_bf16_supported",
              torch.float16: "_is_mkldnn_fp16_supported"}
    if dtype not in checks:
        return True
    try:
        return bool(getattr(torch.ops.mkldnn, checks[dtype])())
    except (AttributeError, RuntimeError):  # a torch without the check: assume support
        return True


def _rnn_layer_in_supported_dtype(*args: Any) -> Any:
    """autocast's policy for the op (cast floating inputs to the region's dtype), with
    float32 in place of a dtype oneDNN cannot run."""
    dtype = torch.get_autocast_dtype("cpu")
    target = dtype if onednn_supports(dtype) else torch.float32
    autocast_off = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
    with torch._C._ExcludeDispatchKeyGuard(autocast_off):
        return getattr(torch.ops.aten, _OP)(*_cast(args, target))


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, list | tuple):
        return type(value)(_cast(item, dtype) for item in value)
    return value
