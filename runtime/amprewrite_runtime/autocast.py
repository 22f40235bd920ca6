"""Autocast regions and custom autograd Function decorators driven by the policy."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from amprewrite_runtime import cpu_rnn
from amprewrite_runtime.policy import as_dtype, current_policy


def autocast(dtype: str | torch.dtype | None = None, *, enabled: bool = True) -> torch.autocast:
    """`torch.autocast` for the current device; enabled at opt level O1 only.

    O0 is plain FP32; O2/O3 cast the model instead of patching operations (apex's
    `patch_torch_functions=False`), so their autocast regions are disabled too. On a CPU
    whose oneDNN lacks the dtype, LSTMs in a region run in float32 (see `cpu_rnn`).
    """
    device, low_precision, at_this_level = current_policy().autocast_settings(dtype)
    if device == "cpu":
        cpu_rnn.prepare(low_precision)
    return torch.autocast(device, dtype=low_precision, enabled=enabled and at_this_level)


def custom_fwd(
    fwd: Callable[..., Any] | None = None, *, cast_inputs: str | torch.dtype | None = None
) -> Any:
    """`torch.amp.custom_fwd` for the device the policy picks at call time.

    Usable bare (`@custom_fwd`) or with `cast_inputs` (`@custom_fwd(cast_inputs="float32")`).
    """
    if fwd is None:
        return functools.partial(custom_fwd, cast_inputs=cast_inputs)
    dtype = as_dtype(cast_inputs)
    return _per_device(fwd, lambda f, device: torch.amp.custom_fwd(
        f, device_type=device, cast_inputs=dtype))


def custom_bwd(bwd: Callable[..., Any]) -> Callable[..., Any]:
    """`torch.amp.custom_bwd` for the device the policy picks at call time."""
    return _per_device(bwd, lambda f, device: torch.amp.custom_bwd(f, device_type=device))


def _per_device(
    function: Callable[..., Any],
    decorate: Callable[[Callable[..., Any], str], Callable[..., Any]],
) -> Callable[..., Any]:
    decorated: dict[str, Callable[..., Any]] = {}

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        device = current_policy().device_type()
        if device not in decorated:
            decorated[device] = decorate(function, device)
        return decorated[device](*args, **kwargs)

    return wrapper
