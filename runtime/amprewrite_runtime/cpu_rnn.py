"""LSTMs under CPU autocast where oneDNN has no low-precision LSTM kernel: run them in float32.

On the CPU, `nn.LSTM` takes oneDNN's path for a float32 input, and autocast then casts that
path's op (`aten::mkldnn_rnn_layer`) to bfloat16/float16. oneDNN builds low-precision LSTM
primitives only for some dtypes on some CPUs: an AVX2 machine has none, and a CPU with AMX and
AVX512-FP16 (whose oneDNN reports float16 support) still has no float16 LSTM. Elsewhere every
LSTM forward under autocast raises "could not create a primitive descriptor for the LSTM
forward propagation primitive". So the first time a CPU region opens in a dtype, a one-cell
LSTM is tried in it; where it fails, autocast's kernel for that op is replaced by one that
runs it in float32 for the dtypes that failed (GRU and RNN never take that path: float32
already).
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import torch

_OP = "mkldnn_rnn_layer"
_library: torch.library.Library | None = None  # keeps the registration alive
_probing: torch.dtype | None = None  # the dtype being tried: the replacement runs it as is


def prepare(dtype: torch.dtype) -> None:
    """Called as a CPU autocast region in `dtype` opens; registers the kernel when needed."""
    global _library
    if _library is not None or onednn_runs_lstm(dtype):
        return
    library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():  # "Overriding a previously registered kernel"
        warnings.simplefilter("ignore")
        library.impl(_OP, _rnn_layer_in_supported_dtype, "AutocastCPU")
    _library = library


@functools.cache
def onednn_runs_lstm(dtype: torch.dtype) -> bool:
    """Whether an LSTM runs under CPU autocast in `dtype` on this machine (tried once)."""
    global _probing
    if dtype == torch.float32 or not torch.backends.mkldnn.is_available():
        return True
    _probing = dtype
    try:
        # With grad (the training primitive, even when the first region is an evaluation
        # under no_grad or inference_mode), without drawing from the script's RNG, and on
        # the CPU whatever `torch.set_default_device` says (elsewhere the probe would try
        # another device's LSTM and draw from that device's generator).
        with torch.random.fork_rng(devices=[]), torch.inference_mode(False), \
                torch.enable_grad(), torch.autocast("cpu", dtype=dtype):
            torch.nn.LSTM(1, 1, device="cpu")(torch.zeros(1, 1, 1, device="cpu"))
    except RuntimeError:
        return False
    finally:
        _probing = None
    return True


def _rnn_layer_in_supported_dtype(*args: Any) -> Any:
    """autocast's policy for the op (cast floating inputs to the region's dtype), with
    float32 in place of a dtype oneDNN cannot run."""
    dtype = torch.get_autocast_dtype("cpu")
    runs = dtype == _probing or onednn_runs_lstm(dtype)
    target = dtype if runs else torch.float32
    torch.set_autocast_enabled("cpu", False)  # run the op itself, not this kernel again
    try:
        return getattr(torch.ops.aten, _OP)(*_cast(args, target))
    finally:
        torch.set_autocast_enabled("cpu", True)  # this kernel runs only when it was


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, list | tuple):
        return type(value)(_cast(item, dtype) for item in value)
    return value
