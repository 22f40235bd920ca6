"""The grad scaler rewritten scripts use: torch's, created where the loss lives, per policy."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

import torch

from amprewrite_runtime.policy import note_device, resolve_dtype, resolve_opt_level

_TORCH_KEYS = {"scale": "scale", "growth_factor": "growth_factor",
               "backoff_factor": "backoff_factor", "growth_interval": "growth_interval",
               "growth_tracker": "_growth_tracker"}


class GradScaler:
    """A drop-in for `torch.amp.GradScaler` that follows amprewrite's precision policy.

    The torch scaler is created at the first `scale()`, on the device of the loss, and only
    scales where that helps (opt level O1 with float16); elsewhere every method is a cheap
    pass-through. `last_step_skipped` tells whether the last `step()` was skipped because of
    inf/NaN gradients, so that a scheduler can skip with it.
    """

    def __init__(
        self,
        opt_level: str | None = None,
        *,
        dtype: str | torch.dtype | None = None,
        device_type: str | None = None,
        sharded: bool = False,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
    ) -> None:
        self.opt_level = resolve_opt_level(opt_level)
        if self.opt_level in ("O2", "O3"):
            raise ValueError(f"opt level {self.opt_level} needs a script rewritten with "
                             f"`amprewrite --opt-level {self.opt_level}`")
        self._dtype = dtype
        self._device_type = device_type
        self._sharded = sharded
        self._state: dict[str, Any] = {
            "scale": float(init_scale), "growth_factor": float(growth_factor),
            "backoff_factor": float(backoff_factor), "growth_interval": int(growth_interval),
            "growth_tracker": 0,
        }
        self._scaler: torch.amp.GradScaler | None = None
        self.skipped_steps = 0
        self.last_step_skipped = False

    # The training step ------------------------------------------------------------------
    def scale(self, outputs: Any) -> Any:
        device = self._device_type or _device_type_of(outputs)
        if device is not None:
            note_device(device)
        return self._torch_scaler(device or "cpu").scale(outputs)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        if self._scaler is not None and self._scaler.is_enabled():
            self._scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        scaler = self._scaler
        if scaler is None or not scaler.is_enabled():
            self.last_step_skipped = False
            return optimizer.step(*args, **kwargs)
        result = scaler.step(optimizer, *args, **kwargs)
        found_inf = scaler._per_optimizer_states[id(optimizer)]["found_inf_per_device"]
        self.last_step_skipped = bool(sum(float(v.item()) for v in found_inf.values()))
        self.skipped_steps += self.last_step_skipped
        return result

    def update(self, new_scale: float | torch.Tensor | None = None) -> None:
        if self._scaler is not None:
            self._scaler.update(new_scale)

    def get_scale(self) -> float:
        return self._scaler.get_scale() if self._scaler is not None else self._state["scale"]

    def is_enabled(self) -> bool:
        return self._scaler is not None and self._scaler.is_enabled()

    # Checkpoints --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        if self.is_enabled():
            assert self._scaler is not None
            native = self._scaler.state_dict()
            self._state = {ours: _plain(native[theirs]) for ours, theirs in _TORCH_KEYS.items()}
        return {"opt_level": self.opt_level, **self._state, "skipped_steps": self.skipped_steps}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore a state from `state_dict()` or from a native `torch.amp.GradScaler`.

        `None` and `{}` (a checkpoint written before the rewrite, or by a disabled scaler)
        leave the scaler as it is.
        """
        if not state:
            return
        if "_growth_tracker" in state:  # a native torch GradScaler's state
            state = {ours: state[theirs] for ours, theirs in _TORCH_KEYS.items() if theirs in state}
        level = state.get("opt_level")
        if level is not None and level != self.opt_level:
            warnings.warn(f"loading a grad scaler state written at opt level {level} into one "
                          f"running at {self.opt_level}", UserWarning, stacklevel=2)
        self._state = {key: _plain(state.get(key, value)) for key, value in self._state.items()}
        self.skipped_steps = int(state.get("skipped_steps", self.skipped_steps))
        if self.is_enabled():
            assert self._scaler is not None
            self._scaler.load_state_dict(self._native_state())

    # Internals ----------------------------------------------------------------------------
    def _torch_scaler(self, device: str) -> torch.amp.GradScaler:
        if self._scaler is None:
            dtype = resolve_dtype(device, self._dtype)
            enabled = self.opt_level == "O1" and dtype == torch.float16
            cls: type[torch.amp.GradScaler] = torch.amp.GradScaler
            if self._sharded:
                from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

                cls = ShardedGradScaler
            self._scaler = cls(device, enabled=enabled)
            if enabled:
                self._scaler.load_state_dict(self._native_state())
        return self._scaler

    def _native_state(self) -> dict[str, Any]:
        return {theirs: self._state[ours] for ours, theirs in _TORCH_KEYS.items()}


def _device_type_of(outputs: Any) -> str | None:
    if isinstance(outputs, torch.Tensor):
        return outputs.device.type
    if isinstance(outputs, dict):
        outputs = outputs.values()
    if isinstance(outputs, Iterable) and not isinstance(outputs, str | bytes):
        for item in outputs:
            found = _device_type_of(item)
            if found is not None:
                return found
    return None


def _plain(value: Any) -> Any:
    """Python scalars only, so states save and load with `torch.load(weights_only=True)`."""
    if isinstance(value, torch.Tensor):
        return value.item()
    return value
