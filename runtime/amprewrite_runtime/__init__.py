"""amprewrite's runtime: what scripts rewritten by amprewrite call.

    from amprewrite_runtime import GradScaler, autocast

One precision policy drives both (`policy.current_policy()`): the opt level
(`AMPREWRITE_OPT_LEVEL` overrides the script's, so `AMPREWRITE_OPT_LEVEL=O0` runs a rewritten
script in plain FP32), the device (where the loss lives, else CUDA when available, else the
CPU) and the dtype (bfloat16, except float16 on CUDA GPUs older than compute capability 8.0;
`AMPREWRITE_DTYPE` overrides). `float8_training(model)` converts a model's linear layers to
float8 (torchao, the `[float8]` extra) where the GPU has float8 tensor cores.
A framework's own switch (`Accelerator(mixed_precision=...)`, `Trainer(precision=...)`,
`TrainingArguments(bf16=...)`) gets `accelerate_mixed_precision()`, `lightning_precision()` or
`mixed_precision_flag(...)`, which leave the choice to the framework's launcher or config when
it made one (`amprewrite_runtime.frameworks`).
Reproducible data loading lives in `amprewrite_runtime.data`. Depends on torch only.
"""

from amprewrite_runtime.autocast import autocast, custom_bwd, custom_fwd
from amprewrite_runtime.casting import float32_sigmoid, to_float32
from amprewrite_runtime.float8 import float8_training
from amprewrite_runtime.frameworks import (
    accelerate_float8_handlers,
    accelerate_mixed_precision,
    lightning_precision,
    mixed_precision_flag,
)
from amprewrite_runtime.policy import (
    current_policy,
    low_precision_dtype,
    prefers_bfloat16,
    reset_policy,
    resolve_device,
    resolve_dtype,
    resolve_opt_level,
)
from amprewrite_runtime.reproducibility import enable_reproducibility
from amprewrite_runtime.scaler import GradScaler
from amprewrite_runtime.trace import seed_from_environment

seed_from_environment()  # `amprewrite compare`'s two runs start alike (AMPREWRITE_SEED)

__all__ = [
    "GradScaler",
    "accelerate_float8_handlers",
    "accelerate_mixed_precision",
    "autocast",
    "current_policy",
    "custom_bwd",
    "custom_fwd",
    "enable_reproducibility",
    "float8_training",
    "float32_sigmoid",
    "lightning_precision",
    "low_precision_dtype",
    "mixed_precision_flag",
    "prefers_bfloat16",
    "reset_policy",
    "resolve_device",
    "resolve_dtype",
    "resolve_opt_level",
    "to_float32",
]
