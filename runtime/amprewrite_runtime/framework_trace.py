"""Step traces of a training loop that a framework owns (Accelerate, Lightning, the Hugging
Face Trainer), for `amprewrite compare`: the same records as `trace.py`'s, where no
amprewrite_runtime GradScaler sees the steps.

The framework switch helpers (`frameworks.py`) install it once per process when
`AMPREWRITE_TRACE` or `AMPREWRITE_MAX_STEPS` is set; otherwise nothing is hooked:

- torch's GradScaler (the frameworks' float16 loss scaling): `scale()` gives the loss, `step()`
  writes the step's record (its scale, and whether it skipped the step for inf/NaN gradients),
  `update()` ends the iteration;
- every other optimizer step (bfloat16, FP32): a global optimizer step hook writes the record
  (scale 1) and ends the iteration; the loss is the last one-element tensor `backward()` ran on.

`AMPREWRITE_MAX_STEPS` ends the run after that many steps (`SystemExit(0)` at the end of the
iteration, as the runtime's scaler does). A process whose training steps go through
amprewrite_runtime's GradScaler is traced by it alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from amprewrite_runtime import torch_internals
from amprewrite_runtime.trace import StepRecord, Tracer

_installed = False
_dtype = "float32"  # what the framework runs in, as the switch helper chose it


def install(dtype: str) -> None:
    """Trace the framework's steps when tracing is on, recording `dtype` ("bfloat16",
    "float16", "float32") as what they ran in."""
    global _installed, _dtype
    _dtype = dtype
    tracer = Tracer.from_env()
    if tracer is None or _installed:
        return
    _installed = True
    hooks = _Hooks(tracer)
    torch.Tensor.backward = hooks.backward(torch.Tensor.backward)  # type: ignore[method-assign]
    scaler = torch.amp.GradScaler
    scaler.scale = hooks.scale(scaler.scale)  # type: ignore[method-assign]
    scaler.step = hooks.scaler_step(scaler.step)  # type: ignore[method-assign]
    scaler.update = hooks.update(scaler.update)  # type: ignore[method-assign]
    register_optimizer_step_post_hook(hooks.on_optimizer_step)


class _Hooks:
    """The wrappers of torch's methods, around one tracer."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer
        self.in_scaler_step = False

    @property
    def off(self) -> bool:
        """Whether amprewrite_runtime's GradScaler traces this process itself."""
        return self.tracer.scaler_owned

    def backward(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if not self.off and tensor.numel() == 1 and not getattr(tensor, _SCALED, False):
                self.tracer.on_scale(tensor)
            return method(tensor, *args, **kwargs)

        return call

    def scale(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(scaler: torch.amp.GradScaler, outputs: Any) -> Any:
            if not self.off:
                self.tracer.on_scale(outputs)
            scaled = method(scaler, outputs)
            if isinstance(scaled, torch.Tensor) and scaled is not outputs:
                setattr(scaled, _SCALED, True)  # its backward is not a new loss
            return scaled

        return call

    def scaler_step(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer,
                 *args: Any, **kwargs: Any) -> Any:
            if self.off:
                return method(scaler, optimizer, *args, **kwargs)
            self.in_scaler_step = True
            try:
                result = method(scaler, optimizer, *args, **kwargs)
            finally:
                self.in_scaler_step = False
            enabled = scaler.is_enabled()
            found = torch_internals.found_inf(scaler, optimizer) if enabled else None
            self._record(float(scaler.get_scale()) if enabled else 1.0,
                         found is not None and bool(found), optimizer)
            return result

        return call

    def update(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(scaler: torch.amp.GradScaler, *args: Any, **kwargs: Any) -> Any:
            result = method(scaler, *args, **kwargs)
            if not self.off:
                self.tracer.on_update()
            return result

        return call

    def on_optimizer_step(self, optimizer: torch.optim.Optimizer, *args: Any) -> None:
        if self.off or self.in_scaler_step:
            return
        self._record(1.0, False, optimizer)
        self.tracer.on_update()

    def _record(self, scale: float, skipped: bool, optimizer: torch.optim.Optimizer) -> None:
        level = "O0" if _dtype == "float32" else "O1"
        record = StepRecord(level, _dtype, _device_of(optimizer), scale, skipped)
        self.tracer.on_step(record if self.tracer.writes else None)


_SCALED = "_amprewrite_scaled_loss"


def _device_of(optimizer: torch.optim.Optimizer) -> str:
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            return str(parameter.device.type)
    return "cpu"
