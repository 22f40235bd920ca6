"""The grad scaler rewritten scripts use: torch's, created where the loss lives, per policy."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from amprewrite_runtime import torch_internals
from amprewrite_runtime.float8 import precompute_scales
from amprewrite_runtime.policy import as_dtype, current_policy, device_type_of
from amprewrite_runtime.precision import MasterWeights, cast_inputs_at_forward, cast_model
from amprewrite_runtime.properties import Properties, properties_for
from amprewrite_runtime.trace import StepRecord, Tracer

# Our state's keys and those of torch's GradScaler.state_dict() (documented there).
_TORCH_KEYS = {"scale": "scale", "growth_factor": "growth_factor",
               "backoff_factor": "backoff_factor", "growth_interval": "growth_interval",
               "growth_tracker": "_growth_tracker"}


class GradScaler:
    """A drop-in for `torch.amp.GradScaler` that follows amprewrite's precision policy.

    The opt level sets apex's properties (override them with `keep_batchnorm_fp32`,
    `master_weights`, `loss_scale`). The torch scaler is created at the first `scale()`, on
    the device of the loss, and scales only where that helps: dynamic scaling for float16,
    or a static `loss_scale`. Elsewhere every method is a cheap pass-through.
    `last_step_skipped` tells whether the last `step()` was skipped for inf/NaN gradients.
    At O2/O3, `initialize(model, optimizer)` casts the model (and keeps master weights).
    Creating one declares its opt level and dtype (and device type, when given) to the
    process's policy, which later `autocast()` regions follow.
    """

    def __init__(
        self,
        opt_level: str | None = None,
        *,
        dtype: str | torch.dtype | None = None,
        device_type: str | None = None,
        sharded: bool = False,
        keep_batchnorm_fp32: bool | str | None = None,
        master_weights: bool | str | None = None,
        loss_scale: str | float | None = None,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
    ) -> None:
        self._policy = policy = current_policy()
        self._dtype = dtype
        self._init_scale = float(init_scale)
        self._state: dict[str, Any] = {
            "scale": self._init_scale,
            "growth_factor": float(growth_factor), "backoff_factor": float(backoff_factor),
            "growth_interval": int(growth_interval), "growth_tracker": 0,
        }
        self._configure(opt_level, keep_batchnorm_fp32, master_weights, loss_scale)
        self._device_type = device_type_of(device_type) if device_type else None
        if self._device_type:
            policy.observe_device(self._device_type)  # autocast regions use it from now on
        self._sharded = sharded
        self._scaler: torch.amp.GradScaler | None = None
        self._masters: dict[int, MasterWeights] = {}
        self._initialized = False
        self._told_uncast = False  # warned that O2/O3 steps a model never cast
        self._unscaled: set[int] = set()
        self._skipped_steps = 0
        self._last_step_skipped = False
        # torch's found-inf flags, kept on the device until someone asks (_read_skips): the
        # last step's, and the number of skipped steps since the last read.
        self._unread_skip: torch.Tensor | None = None
        self._unread_skips: torch.Tensor | None = None
        self._skips_known_at_update = False  # torch's found-inf flags were unreadable
        self._tracer = Tracer.from_env()  # None unless AMPREWRITE_TRACE/_MAX_STEPS is set
        if self._tracer is not None:
            self._tracer.scaler_owned = True  # no framework hook traces its steps too
        # Known after the first scale(): the scaler is off and nothing else happens around
        # a step (no tracer, no master weights, no model cast to check), so scale(), step()
        # and update() only pass through. A rewritten step's overhead is a few attribute
        # reads then (benchmarks/overhead.py).
        self._passthrough = False

    @property
    def last_step_skipped(self) -> bool:
        """Whether the last `step()` skipped `optimizer.step()` for inf/NaN gradients."""
        self._read_skips()
        return self._last_step_skipped

    @property
    def skipped_steps(self) -> int:
        """How many steps were skipped for inf/NaN gradients (kept in checkpoints)."""
        self._read_skips()
        return self._skipped_steps

    # Setup (O2/O3) -----------------------------------------------------------------------
    def initialize(
        self,
        model: nn.Module | Sequence[nn.Module],
        optimizer: torch.optim.Optimizer,
        opt_level: str | None = None,
        *,
        keep_batchnorm_fp32: bool | str | None = None,
        master_weights: bool | str | None = None,
        loss_scale: str | float | None = None,
    ) -> tuple[nn.Module | Sequence[nn.Module], torch.optim.Optimizer]:
        """Cast `model` (or the models `optimizer` steps together, `[encoder, decoder]`, as
        apex's `amp.initialize` takes them) for O2/O3 and give `optimizer` float32 master
        weights (O2).

        A no-op at O0/O1, so a script rewritten at O2 also runs at O0/O1 through
        `AMPREWRITE_OPT_LEVEL`. Returns the same objects, changed in place. An opt level or
        property given here replaces the scaler's, as apex's `amp.initialize` set them where
        the script knows them (`opt_level=args.opt_level if args.amp else "O0"`); only
        before the first `scale()`.
        """
        if opt_level is not None or any(value is not None for value in (
                keep_batchnorm_fp32, master_weights, loss_scale)):
            if self._scaler is not None:
                raise RuntimeError("GradScaler.initialize(opt_level=...) must come before the "
                                   "first scale()")
            self._configure(opt_level, keep_batchnorm_fp32, master_weights, loss_scale)
        self._initialized = True
        self._passthrough = False  # master weights may follow: the full path from now on
        if not self.properties.cast_model:
            return model, optimizer
        models = list(model) if isinstance(model, list | tuple) else [model]
        device = self._device_type or next(models[0].parameters()).device.type
        self._policy.observe_device(device)
        dtype = self._policy.dtype(device, self._dtype)
        if (dtype == torch.float16 and not self.properties.master_weights
                and not torch_internals.unscales_low_precision()):
            warnings.warn(f"{self.opt_level} keeps float32 master weights: this torch's "
                          "GradScaler cannot be made to unscale float16 gradients",
                          RuntimeWarning, stacklevel=2)
            self.properties = replace(self.properties, master_weights=True)
        for each in models:
            cast_model(each, dtype, self.properties.keep_batchnorm_fp32)
            cast_inputs_at_forward(each, dtype)
        if self.properties.master_weights:
            self._masters[id(optimizer)] = MasterWeights(models, optimizer)
        return model, optimizer

    def master_params(self, optimizer: torch.optim.Optimizer) -> Iterator[nn.Parameter]:
        """The parameters the optimizer steps (float32 masters at O2): clip these."""
        for group in optimizer.param_groups:
            yield from group["params"]

    # The training step ------------------------------------------------------------------
    def scale(self, outputs: Any) -> Any:
        """Multiply a loss (or nested lists/tuples/iterables of them) by the scale, like torch.

        The first call creates the torch scaler on the loss's device type and records that
        device for later `autocast()` regions (as does every call while scaling is on).
        Returns `outputs` itself when not scaling.
        """
        if self._passthrough and type(outputs) is torch.Tensor:
            return outputs  # nothing to scale, and the device was recorded at the first call
        if self._tracer is not None:
            self._tracer.on_scale(outputs)
        if not isinstance(outputs, torch.Tensor | list | tuple) and isinstance(outputs, Iterable):
            items = tuple(outputs)  # probe a generator for its device without consuming it
            found = _device_type_of(items)
            outputs = iter(items)
        else:
            found = _device_type_of(outputs)
        device = self._device_type or found
        if device is not None:
            self._policy.observe_device(device)
        return self._torch_scaler(device or self._policy.device_type()).scale(outputs)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide `optimizer`'s gradients by the scale (before clipping); a no-op when off."""
        masters = self._masters.get(id(optimizer))
        if masters is not None and id(optimizer) not in self._unscaled:
            masters.grads_to_masters()
        self._unscaled.add(id(optimizer))
        if self._scaler is not None and self._scaler.is_enabled():
            self._scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        """`optimizer.step(*args, **kwargs)` unless the gradients hold inf/NaN values."""
        if self._passthrough:
            self._unscaled.discard(id(optimizer))
            result = optimizer.step(*args, **kwargs)
            precompute_scales(optimizer)
            return result
        if self.properties.cast_model and not self._initialized and not self._told_uncast:
            warnings.warn(f"opt level {self.opt_level} casts the model, but "
                          "`scaler.initialize(model, optimizer)` was never called: the model "
                          "trains as it is, in float32 (call it after building the optimizer)",
                          RuntimeWarning, stacklevel=2)
            self._told_uncast = True
        masters = self._masters.get(id(optimizer))
        if masters is not None and id(optimizer) not in self._unscaled:
            masters.grads_to_masters()
        self._unscaled.discard(id(optimizer))
        scaler = self._scaler
        if scaler is None or not scaler.is_enabled():
            self._note_step(None)
            result = optimizer.step(*args, **kwargs)
        else:
            result = scaler.step(optimizer, *args, **kwargs)
            found = torch_internals.found_inf(scaler, optimizer)
            self._skips_known_at_update |= found is None
            self._note_step(found)
        if masters is not None and not self.last_step_skipped:
            masters.masters_to_model()
        precompute_scales(optimizer)
        if self._tracer is not None:
            self._tracer.on_step(self._step_record() if self._tracer.writes else None)
        return result

    def update(self, new_scale: float | torch.Tensor | None = None) -> None:
        """Back the scale off after a skipped step, grow it after `growth_interval` good ones."""
        if self._passthrough:
            return
        if self._tracer is not None:
            self._tracer.on_update()
        if self._scaler is None:
            return
        if new_scale is None and self.properties.loss_scale != "dynamic":
            new_scale = float(self.properties.loss_scale)  # a static scale never changes
        if self._skips_known_at_update:
            self._update_telling_skips(new_scale)
        else:
            self._scaler.update(new_scale)

    def get_scale(self) -> float:
        """The current scale: 1.0 once known to be off, the pending scale before first use."""
        return self._scaler.get_scale() if self._scaler is not None else self._state["scale"]

    def is_enabled(self) -> bool:
        """Whether losses are scaled; False until the first `scale()` decides it."""
        return self._scaler is not None and self._scaler.is_enabled()

    # Checkpoints --------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Python scalars only: opt level, scale, growth/backoff settings, skipped steps."""
        return {"opt_level": self.opt_level, **self._scale_state(),
                "skipped_steps": self.skipped_steps}

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
        self._state = {key: _plain(state.get(key, value))
                       for key, value in self._scale_state().items()}
        self._skipped_steps = int(state.get("skipped_steps", self.skipped_steps))
        if self.is_enabled():
            assert self._scaler is not None
            self._scaler.load_state_dict(self._native_state())

    # Internals ----------------------------------------------------------------------------
    def _configure(
        self,
        opt_level: str | None,
        keep_batchnorm_fp32: bool | str | None,
        master_weights: bool | str | None,
        loss_scale: str | float | None,
    ) -> None:
        """Declare the opt level to the policy (the environment's wins, and then the
        script's property overrides are dropped) and set the properties and initial scale."""
        self._policy.declare(opt_level, as_dtype(self._dtype))
        self.opt_level = self._policy.opt_level(opt_level)
        if opt_level is not None and self.opt_level != opt_level:
            keep_batchnorm_fp32 = master_weights = loss_scale = None  # the script's overrides
        self.properties: Properties = properties_for(
            self.opt_level, keep_batchnorm_fp32, master_weights, loss_scale)
        static = self.properties.loss_scale != "dynamic"
        self._state["scale"] = float(self.properties.loss_scale) if static else self._init_scale

    def _scale_state(self) -> dict[str, Any]:
        """The scale and its growth settings: torch's once scaling, else those pending."""
        if not self.is_enabled():
            return self._state
        assert self._scaler is not None
        native = self._scaler.state_dict()
        return {ours: _plain(native[theirs]) for ours, theirs in _TORCH_KEYS.items()}

    def _step_record(self) -> StepRecord:
        device = self._policy.device_type()
        dtype = "float32" if self.opt_level == "O0" else str(self._policy.dtype(device))
        return StepRecord(self.opt_level, dtype.removeprefix("torch."), device,
                          float(self.get_scale()), self.last_step_skipped)

    def _update_telling_skips(self, new_scale: float | torch.Tensor | None) -> None:
        """`update()` where torch's found-inf flags were unreadable (`torch_internals`): as
        Accelerate does, a step was skipped if the dynamic update backed the scale off; a
        static (or given) scale then replaces the updated one."""
        assert self._scaler is not None
        self._read_skips()
        before = self._scaler.get_scale()
        self._scaler.update()
        self._last_step_skipped = self._scaler.get_scale() < before
        self._skipped_steps += self._last_step_skipped
        self._skips_known_at_update = False
        if new_scale is not None:
            self._scaler.update(new_scale)

    def _note_step(self, found: torch.Tensor | None) -> None:
        """A step taken (`found` None) or for torch's scaler to decide (`found`: its flag,
        not read yet: reading it here would stall the host until the optimizer step just
        queued has run, so the next step could not be queued meanwhile)."""
        self._last_step_skipped = False
        self._unread_skip = found
        if found is not None:
            count = found.int()
            self._unread_skips = (count if self._unread_skips is None
                                  else self._unread_skips + count)

    def _read_skips(self) -> None:
        """Read the flags kept on the device (one sync): the last step's, and the count."""
        if self._unread_skips is None:
            return
        last = self._unread_skip
        if last is None:
            self._skipped_steps += int(self._unread_skips.item())
        else:
            skipped, count = torch.stack([last.int(), self._unread_skips]).tolist()
            self._last_step_skipped = bool(skipped)
            self._skipped_steps += count
        self._unread_skip = self._unread_skips = None

    def _torch_scaler(self, device: str) -> torch.amp.GradScaler:
        if self._scaler is None:
            self._scaler = self._new_torch_scaler(device)
            if self._scaler.is_enabled():
                self._scaler.load_state_dict(self._native_state())
            self._passthrough = (not self._scaler.is_enabled() and self._tracer is None
                                 and not self.properties.cast_model and not self._masters)
        return self._scaler

    def _new_torch_scaler(self, device: str) -> torch.amp.GradScaler:
        level, properties = self.opt_level, self.properties
        if properties.loss_scale == "dynamic":
            dtype = self._policy.dtype(device, self._dtype)
            enabled = level != "O0" and dtype == torch.float16
        else:
            enabled = level != "O0"  # a static scale: skips inf/NaN steps, never grows
        if self._sharded:
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

            return ShardedGradScaler(device, enabled=enabled)
        if (properties.cast_model and not properties.master_weights
                and torch_internals.unscales_low_precision()):
            return torch_internals.AnyPrecisionGradScaler(device, enabled=enabled)
        return torch.amp.GradScaler(device, enabled=enabled)

    def _native_state(self) -> dict[str, Any]:
        return {theirs: self._state[ours] for ours, theirs in _TORCH_KEYS.items()}


def _device_type_of(outputs: Any) -> str | None:
    """The device type of the first tensor in `outputs`, looking into lists and tuples only
    (never into iterators, which the probe would consume)."""
    if isinstance(outputs, torch.Tensor):
        return outputs.device.type
    if isinstance(outputs, list | tuple):
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
