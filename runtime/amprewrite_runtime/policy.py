"""One place decides the precision policy: opt level, device type and dtype.

Resolution order, for each setting:
- opt level: `AMPREWRITE_OPT_LEVEL` > the script's argument (a `GradScaler(opt_level)`
  declares it for the whole process, autocast regions included) > "O1";
- dtype: `AMPREWRITE_DTYPE` > the script's argument (`autocast(dtype)`, else the one a
  `GradScaler(dtype=...)` declared) > float16 on CUDA, bfloat16 elsewhere;
- device type: `AMPREWRITE_DEVICE` > the script's argument > where the last scaled loss lived
  > "cuda" when CUDA is available, else "cpu".

Environment variables are read once, at first use; tests call `_reset()` after changing them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from amprewrite_runtime.properties import LEVELS

OPT_LEVELS = ("O0", "O1", "O2", "O3")
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
ENV_OPT_LEVEL = "AMPREWRITE_OPT_LEVEL"
ENV_DTYPE = "AMPREWRITE_DTYPE"
ENV_DEVICE = "AMPREWRITE_DEVICE"


@dataclass(frozen=True)
class Overrides:
    """Settings from the environment, which win over the script's own arguments."""

    opt_level: str | None
    dtype: torch.dtype | None
    device_type: str | None


class _State:
    overrides: Overrides | None = None
    last_device: str | None = None  # device type of the last loss a scaler scaled
    declared_level: str | None = None  # the opt level the script's GradScaler asked for
    declared_dtype: torch.dtype | None = None  # the dtype the script's GradScaler asked for
    default_device: str | None = None
    # autocast()'s (device type, dtype, enabled) with no arguments; forgotten whenever a
    # setting it depends on changes (a rewritten step builds one autocast per iteration).
    autocast: tuple[str, torch.dtype, bool] | None = None


def overrides() -> Overrides:
    """The environment's settings, read and validated once (until `_reset()`)."""
    if _State.overrides is None:
        dtype = _env_choice(ENV_DTYPE, ("float16", "bfloat16"))
        _State.overrides = Overrides(
            opt_level=_env_choice(ENV_OPT_LEVEL, OPT_LEVELS),
            dtype=DTYPES[dtype] if dtype else None,
            device_type=_env_device(),
        )
    return _State.overrides


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


def device_type_of(device: str | torch.device) -> str:
    """The type of a device ("cuda:0" and `torch.device("cuda", 0)` give "cuda")."""
    try:
        return torch.device(device).type
    except RuntimeError as error:
        raise ValueError(f"device {device!r} is not valid: {error}") from None


def _reset() -> None:
    """Forget cached environment settings, declared settings and the observed device.

    For tests: call it after changing `AMPREWRITE_*` variables (e.g. with monkeypatch).
    """
    _State.overrides = None
    _State.autocast = None
    _State.last_device = None
    _State.default_device = None
    _State.declared_level = None
    _State.declared_dtype = None


def declare(level: str | None, dtype: torch.dtype | None) -> None:
    """The script's own opt level and dtype (from its GradScaler), used where no other is given."""
    _State.declared_level = level
    _State.declared_dtype = dtype
    _State.autocast = None


def resolve_opt_level(requested: str | None = None) -> str:
    """The opt level in force: the environment's, else `requested`, else the declared one."""
    level = overrides().opt_level or requested or _State.declared_level or "O1"
    if level not in OPT_LEVELS:
        raise ValueError(f"opt level {level!r} is not valid; use one of {', '.join(OPT_LEVELS)}")
    return level


def resolve_device(requested: str | None = None) -> str:
    """The device type autocast regions and scalers use (see the module docstring)."""
    device = overrides().device_type or requested or _State.last_device
    if device is not None:
        return device
    if _State.default_device is None:
        _State.default_device = "cuda" if torch.cuda.is_available() else "cpu"
    return _State.default_device


def resolve_dtype(device_type: str, requested: str | torch.dtype | None = None) -> torch.dtype:
    """The low-precision dtype: the environment's, else `requested`, else the device's default."""
    dtype = overrides().dtype or as_dtype(requested) or _State.declared_dtype
    if dtype is not None:
        return dtype
    return torch.float16 if device_type == "cuda" else torch.bfloat16


def as_dtype(value: str | torch.dtype | None) -> torch.dtype | None:
    """A dtype from its name ("float16", "bfloat16", "float32"); None stays None."""
    if value is None or isinstance(value, torch.dtype):
        return value
    try:
        return DTYPES[value]
    except KeyError:
        raise ValueError(f"dtype {value!r} is not valid; use one of {', '.join(DTYPES)}") from None


def note_device(device_type: str) -> None:
    """Record where training runs (the device of a scaled loss) for later autocast regions."""
    if device_type != _State.last_device:
        _State.last_device = device_type
        _State.autocast = None


def autocast_settings(requested: str | torch.dtype | None = None) -> tuple[str, torch.dtype, bool]:
    """The device type and dtype of an autocast region, and whether the opt level in force
    enables it (O1 only: O2/O3 cast the model instead)."""
    if requested is None and _State.autocast is not None:
        return _State.autocast
    device = resolve_device()
    enabled = LEVELS[resolve_opt_level()].patch_functions
    settings = (device, resolve_dtype(device, requested), enabled)
    if requested is None:
        _State.autocast = settings
    return settings
