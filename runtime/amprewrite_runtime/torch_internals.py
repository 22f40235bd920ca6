"""The private torch APIs the runtime relies on: each checked before use, each with a fallback
on public API where the check fails.

- `GradScaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"]`: whether the step
  just taken was skipped for inf/NaN gradients (`last_step_skipped` right after `step()`).
  Fallback: compare the scale before and after `update()`, as Accelerate does (a skipped step
  is then known from `update()` on).
- `GradScaler._unscale_grads_(optimizer, inv_scale, found_inf, allow_fp16)`: O3 steps float16
  weights without masters, whose gradients torch refuses to unscale; overriding this lets it.
  Fallback: O3 in float16 keeps float32 master weights (O2's way), with a warning.
- `torch.nn.modules.batchnorm._BatchNorm`: the layers `keep_batchnorm_fp32` keeps in float32
  (user subclasses included). Fallback: torch's public batchnorm classes.

`tests/runtime/test_torch_internals.py` asserts that each is still there with the shape used
here, so that a torch release that changes one fails that test loudly while the runtime falls
back silently.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

UNSCALE_GRADS_PARAMETERS = ("self", "optimizer", "inv_scale", "found_inf", "allow_fp16")
PUBLIC_BATCHNORMS: tuple[type[nn.Module], ...] = (
    nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm,
    nn.LazyBatchNorm1d, nn.LazyBatchNorm2d, nn.LazyBatchNorm3d,
)


def found_inf(
    scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer
) -> torch.Tensor | None:
    """Whether torch's `scaler.step(optimizer)` just skipped the step for inf/NaN gradients,
    as a new boolean tensor on the device (queued, not read: reading it waits for the
    optimizer step just queued, a sync torch's own `step()` does not make); None where torch
    no longer keeps its flags as expected. A new tensor, because torch's `update()` adds the
    other optimizers' flags into the first one's in place."""
    states = getattr(scaler, "_per_optimizer_states", None)
    state = states.get(id(optimizer)) if isinstance(states, Mapping) else None
    flags = state.get("found_inf_per_device") if isinstance(state, Mapping) else None
    if not isinstance(flags, Mapping) or not flags:
        return None
    tensors = list(flags.values())
    if not all(isinstance(flag, torch.Tensor) for flag in tensors):
        return None
    if len(tensors) == 1:
        return tensors[0] > 0
    return torch.stack([flag.to(tensors[0].device) for flag in tensors]).amax() > 0


@functools.cache
def unscales_low_precision() -> bool:
    """Whether `AnyPrecisionGradScaler` can work: torch's `_unscale_grads_` still has the
    parameters it overrides."""
    try:
        parameters = inspect.signature(torch.amp.GradScaler._unscale_grads_).parameters
    except (AttributeError, TypeError, ValueError):
        return False
    return tuple(parameters) == UNSCALE_GRADS_PARAMETERS


class AnyPrecisionGradScaler(torch.amp.GradScaler):
    """Unscales float16 gradients too. Use it only where `unscales_low_precision()`."""

    def _unscale_grads_(
        self, optimizer: torch.optim.Optimizer, inv_scale: torch.Tensor,
        found_inf: torch.Tensor, allow_fp16: bool,
    ) -> Any:
        return super()._unscale_grads_(optimizer, inv_scale, found_inf, True)


def batchnorm_types() -> tuple[type[nn.Module], ...]:
    """torch's base class of batchnorm layers, or its public batchnorm classes where that
    base is gone or no longer theirs."""
    base = getattr(nn.modules.batchnorm, "_BatchNorm", None)
    if isinstance(base, type) and all(issubclass(kind, base) for kind in PUBLIC_BATCHNORMS):
        return (base,)
    return PUBLIC_BATCHNORMS


BATCHNORMS = batchnorm_types()
