"""The precision policy: one object decides the opt level, the device type and the dtype.

Resolution order, for each setting:
- opt level: `AMPREWRITE_OPT_LEVEL` > the caller's argument > the level the script's
  `GradScaler(opt_level)` declared > "O1";
- dtype: `AMPREWRITE_DTYPE` (`float8`: bfloat16 autocast over float8 linear layers, see
  `amprewrite_runtime.float8`) > the caller's argument (`autocast(dtype)`) > the dtype a
  `GradScaler(dtype=...)` declared > the device's default: bfloat16, except float16 (with
  dynamic loss scaling) on a CUDA device without bfloat16 tensor cores (compute capability
  below 8.0);
- device type: `AMPREWRITE_DEVICE` > the caller's argument > the device training was observed
  on (a `GradScaler(device_type=...)`, the model at `initialize()`, the last scaled loss) >
  "cuda" when CUDA is available, else "cpu".

A process has one current policy, `current_policy()`, created at first use from the
environment. Scalers write to it, explicitly: `declare()` when created, `observe_device()` when
they learn where training runs, so that autocast regions opened afterwards follow them.
`reset_policy()` forgets it; the next use reads the environment again (tests call it after
changing `AMPREWRITE_*` variables).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch

from amprewrite_runtime.properties import LEVELS

OPT_LEVELS = ("O0", "O1", "O2", "O3")
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
ENV_OPT_LEVEL = "AMPREWRITE_OPT_LEVEL"
ENV_DTYPE = "AMPREWRITE_DTYPE"
ENV_DEVICE = "AMPREWRITE_DEVICE"

AutocastSettings = tuple[str, torch.dtype, bool]  # device type, dtype, enabled


@dataclass(frozen=True)
class Overrides:
    """Settings from the environment, which win over the script's own arguments."""

    opt_level: str | None = None
    dtype: torch.dtype | None = None
    device_type: str | None = None
    float8: bool | None = None  # AMPREWRITE_DTYPE=float8 (True), another dtype (False), none

    @classmethod
    def from_environment(cls) -> Overrides:
        """`AMPREWRITE_OPT_LEVEL`, `AMPREWRITE_DTYPE` and `AMPREWRITE_DEVICE`, validated;
        float8 autocasts to bfloat16 (its linear layers are float8's)."""
        dtype = _env_choice(ENV_DTYPE, ("float16", "bfloat16", "float8"))
        return cls(opt_level=_env_choice(ENV_OPT_LEVEL, OPT_LEVELS),
                   dtype=DTYPES["bfloat16" if dtype == "float8" else dtype] if dtype else None,
                   device_type=_env_device(), float8=dtype == "float8" if dtype else None)


class Policy:
    """The opt level, device type and dtype in force (see the module docstring)."""

    def __init__(self, overrides: Overrides | None = None) -> None:
        self.overrides = overrides or Overrides()
        self.declared_level: str | None = None  # the opt level the script's GradScaler asked for
        self.declared_dtype: torch.dtype | None = None  # the dtype it asked for
        self.observed_device: str | None = None  # the device type training was seen on
        self._default_device: str | None = None
        # autocast()'s settings without arguments, kept until a setting they depend on changes
        # (a rewritten step opens one autocast region per iteration).
        self._autocast: AutocastSettings | None = None

    def declare(self, opt_level: str | None, dtype: torch.dtype | None) -> None:
        """The script's own opt level and dtype (from its GradScaler), used where no other
        is given; None declares none."""
        if opt_level is not None:
            _check_level(opt_level)
        self.declared_level = opt_level
        self.declared_dtype = dtype
        self._autocast = None

    def observe_device(self, device_type: str) -> None:
        """Where training runs (a scaled loss's device type), for later autocast regions."""
        if device_type != self.observed_device:
            self.observed_device = device_type
            self._autocast = None

    def opt_level(self, requested: str | None = None) -> str:
        """The environment's level, else `requested`, else the declared one, else "O1"."""
        level = self.overrides.opt_level or requested or self.declared_level or "O1"
        _check_level(level)
        return level

    def device_type(self, requested: str | None = None) -> str:
        """The environment's device type, else `requested`, else the observed one, else
        "cuda" when CUDA is available, else "cpu"."""
        device = self.overrides.device_type or requested or self.observed_device
        if device is not None:
            return device
        if self._default_device is None:
            self._default_device = "cuda" if torch.cuda.is_available() else "cpu"
        return self._default_device

    def dtype(self, device_type: str, requested: str | torch.dtype | None = None) -> torch.dtype:
        """The environment's dtype, else `requested`, else the declared one, else the
        device's default (`default_dtype`)."""
        dtype = self.overrides.dtype or as_dtype(requested) or self.declared_dtype
        if dtype is not None:
            return dtype
        return default_dtype(device_type)

    def low_precision_dtype(self) -> torch.dtype:
        """The dtype mixed precision uses here: on the device training runs on, as above."""
        return self.dtype(self.device_type())

    def autocast_settings(self, requested: str | torch.dtype | None = None) -> AutocastSettings:
        """An autocast region's device type and dtype, and whether the opt level enables it
        (O1 only: O2/O3 cast the model instead)."""
        if requested is None and self._autocast is not None:
            return self._autocast
        device = self.device_type()
        settings = (device, self.dtype(device, requested),
                    LEVELS[self.opt_level()].patch_functions)
        if requested is None:
            self._autocast = settings
        return settings


_current: Policy | None = None


def current_policy() -> Policy:
    """The process's policy, created from the environment at first use."""
    global _current
    if _current is None:
        _current = Policy(Overrides.from_environment())
    return _current


def reset_policy() -> None:
    """Forget the process's policy: the next use reads the environment again and knows
    nothing declared or observed (scalers created before keep the policy they were given)."""
    global _current
    _current = None


def resolve_opt_level(requested: str | None = None) -> str:
    """`current_policy().opt_level(requested)`."""
    return current_policy().opt_level(requested)


def resolve_device(requested: str | None = None) -> str:
    """`current_policy().device_type(requested)`."""
    return current_policy().device_type(requested)


def resolve_dtype(device_type: str, requested: str | torch.dtype | None = None) -> torch.dtype:
    """`current_policy().dtype(device_type, requested)`."""
    return current_policy().dtype(device_type, requested)


def low_precision_dtype() -> torch.dtype:
    """The dtype mixed precision uses on this machine (`AMPREWRITE_DTYPE` overrides): what a
    framework's precision setting or an FSDP policy is given in a rewritten script."""
    return current_policy().low_precision_dtype()


def prefers_bfloat16() -> bool:
    """Whether mixed precision here is bfloat16 (else float16, with loss scaling): for
    framework switches that take a flag (`bf16=prefers_bfloat16()`)."""
    return low_precision_dtype() == torch.bfloat16


def default_dtype(device_type: str) -> torch.dtype:
    """bfloat16 (float32's range: no loss scaling, no float16 overflows), except float16 on
    a CUDA device without bfloat16 tensor cores (compute capability below 8.0: V100, T4),
    where bfloat16 would be emulated and slow."""
    if device_type == "cuda" and not _cuda_has_bfloat16():
        return torch.float16
    return torch.bfloat16


@functools.cache
def _cuda_has_bfloat16() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)


def as_dtype(value: str | torch.dtype | None) -> torch.dtype | None:
    """A dtype from its name ("float16", "bfloat16", "float32"); None stays None."""
    if value is None or isinstance(value, torch.dtype):
        return value
    try:
        return DTYPES[value]
    except KeyError:
        raise ValueError(f"dtype {value!r} is not valid; use one of {', '.join(DTYPES)}") from None


def device_type_of(device: str | torch.device) -> str:
    """The type of a device ("cuda:0" and `torch.device("cuda", 0)` give "cuda")."""
    try:
        return torch.device(device).type
    except RuntimeError as error:
        raise ValueError(f"device {device!r} is not valid: {error}") from None


def _check_level(level: str) -> None:
    if level not in OPT_LEVELS:
        raise ValueError(f"opt level {level!r} is not valid; use one of {', '.join(OPT_LEVELS)}")


def _env_choice(variable: str, choices: tuple[str, ...]) -> str | None:
    value = os.environ.get(variable)
    if not value:
        return None
    if value not in choices:
        raise ValueError(f"{variable}={value!r} is not valid; use one of {', '.join(choices)}")
    return value


def _env_device() -> str | None:
    """`AMPREWRITE_DEVICE` as a device type ("cuda:1" gives "cuda", which autocast takes)."""
    value = os.environ.get(ENV_DEVICE)
    if not value:
        return None
    try:
        return device_type_of(value)
    except ValueError:
        raise ValueError(f"{ENV_DEVICE}={value!r} is not valid; use a torch device type "
                         "such as cuda, cpu, mps or xpu") from None
