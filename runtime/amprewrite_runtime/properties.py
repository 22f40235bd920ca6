"""apex.amp's opt levels as property sets (see apex's `opt_level` documentation)."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Properties:
    cast_model: bool  # cast_model_type: weights in the low-precision dtype
    patch_functions: bool  # patch_torch_functions: autocast regions are active
    keep_batchnorm_fp32: bool
    master_weights: bool  # the optimizer steps float32 copies of low-precision weights
    loss_scale: str | float  # "dynamic" or a static scale


LEVELS = {
    "O0": Properties(False, False, False, False, 1.0),
    "O1": Properties(False, True, False, False, "dynamic"),
    "O2": Properties(True, False, True, True, "dynamic"),
    "O3": Properties(True, False, False, False, 1.0),
}


def _flag(value: bool | str) -> bool:
    """apex scripts often pass properties straight from argparse, as "True"/"False" strings."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on")
    return bool(value)


def properties_for(
    level: str,
    keep_batchnorm_fp32: bool | str | None = None,
    master_weights: bool | str | None = None,
    loss_scale: str | float | None = None,
) -> Properties:
    """The level's defaults with the script's overrides (None keeps the default)."""
    chosen = LEVELS[level]
    if keep_batchnorm_fp32 is not None:
        chosen = replace(chosen, keep_batchnorm_fp32=_flag(keep_batchnorm_fp32))
    if master_weights is not None:
        chosen = replace(chosen, master_weights=_flag(master_weights))
    if loss_scale is not None:
        scale = loss_scale if loss_scale == "dynamic" else float(loss_scale)
        chosen = replace(chosen, loss_scale=scale)
    return chosen
