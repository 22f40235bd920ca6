"""What a rewritten script hands its framework's precision switch: mixed precision unless
the run says otherwise.

A value written into the script (`Accelerator(mixed_precision="bf16")`) would win over the
framework's own launcher and config, so the rewrite writes a call to one of these instead,
which answers, in this order:

1. `AMPREWRITE_OPT_LEVEL=O0` (`amprewrite compare`'s FP32 run): FP32.
2. the framework's launcher or config chose (`accelerate launch --mixed_precision ...` and
   Accelerate's config set `ACCELERATE_MIXED_PRECISION`, `fabric run --precision ...` sets
   `LT_PRECISION`): None, or False for a flag, so that the framework reads its own choice.
   The Hugging Face Trainer reads `ACCELERATE_MIXED_PRECISION` when neither `bf16` nor `fp16`
   is set.
3. else mixed precision in the dtype asked for (`--dtype` at rewrite time), else the
   runtime's policy's (`AMPREWRITE_DTYPE`, else bfloat16 where the machine has it).

With `AMPREWRITE_TRACE` or `AMPREWRITE_MAX_STEPS` set (`amprewrite compare`), each also
traces the framework's optimizer steps (`framework_trace`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch

from amprewrite_runtime import framework_trace
from amprewrite_runtime.float8 import float8_chosen, float8_emulated
from amprewrite_runtime.policy import as_dtype, current_policy

ENV_ACCELERATE = "ACCELERATE_MIXED_PRECISION"
ENV_LIGHTNING = "LT_PRECISION"
_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16"}
_ACCELERATE = {"bfloat16": "bf16", "float16": "fp16"}
_LIGHTNING = {"bfloat16": "bf16-mixed", "float16": "16-mixed"}
_FLAGS = {"bf16": "bfloat16", "fp16": "float16"}


def accelerate_mixed_precision(dtype: str | None = None) -> str | None:
    """`Accelerator(mixed_precision=...)`: "no" at O0, None where `accelerate launch` or its
    config chose, else "bf16" or "fp16"; "float8" asks for "fp8" where float8 is chosen here
    (`float8.float8_chosen`, with `accelerate_float8_handlers()` beside it), else "bf16"."""
    float8 = dtype == "float8"
    chosen = _mixed_precision("bfloat16" if float8 else dtype, ENV_ACCELERATE)
    if chosen is None:
        return "no"
    if chosen == "framework":
        return None
    return "fp8" if float8 and float8_chosen() else _ACCELERATE[chosen]


def accelerate_float8_handlers() -> list[Any]:
    """`Accelerator(kwargs_handlers=...)` beside `accelerate_mixed_precision("float8")`:
    Accelerate's torchao float8 recipe where float8 is chosen here (emulated where the device
    has no float8 matrix multiplies), else none."""
    if os.environ.get(ENV_ACCELERATE) or not float8_chosen(quiet=True):
        return []  # (O0 is not chosen either)
    from accelerate.utils import AORecipeKwargs
    from torchao.float8 import Float8LinearConfig

    emulated = float8_emulated()
    how = ", emulated: no float8 matrix multiplies on this device" if emulated else ""
    print(f"amprewrite: float8 (Accelerate's torchao recipe{how})", file=sys.stderr, flush=True)
    return [AORecipeKwargs(config=Float8LinearConfig(emulate=emulated))]


def lightning_precision(dtype: str | None = None) -> str | None:
    """`Trainer(precision=...)`, `Fabric(precision=...)`: None where `fabric run --precision`
    chose (at O0 too: Fabric refuses an argument that contradicts it), "32-true" at O0, else
    "bf16-mixed" or "16-mixed"."""
    if os.environ.get(ENV_LIGHTNING):
        framework_trace.install(_launched(os.environ[ENV_LIGHTNING]))
        return None
    chosen = _mixed_precision(dtype, ENV_LIGHTNING)
    return "32-true" if chosen is None else _LIGHTNING[chosen]


def mixed_precision_flag(flag: str, dtype: str | None = None) -> bool:
    """`TrainingArguments(bf16=..., fp16=...)`, a DeepSpeed config's `"bf16"`/`"fp16"`
    section's `"enabled"`: whether mixed precision runs in this flag's dtype; False at O0 and
    where `accelerate launch` chose (the Trainer then reads its choice)."""
    if flag not in _FLAGS:
        raise ValueError(f"flag {flag!r} is not valid; use one of {', '.join(_FLAGS)}")
    return _mixed_precision(dtype, ENV_ACCELERATE) == _FLAGS[flag]


def _mixed_precision(dtype: str | None, variable: str) -> str | None:
    """None at O0, "framework" where `variable` holds the launcher's choice, else the dtype's
    name; the trace (when asked for) records what the framework will run in."""
    policy = current_policy()
    if policy.opt_level() == "O0":
        framework_trace.install("float32")
        return None
    launched = os.environ.get(variable)
    if launched:
        framework_trace.install(_launched(launched))
        return "framework"
    chosen = _NAMES[as_dtype(dtype) or policy.low_precision_dtype()]
    framework_trace.install(chosen)
    return chosen


def _launched(value: str) -> str:
    """The dtype a launcher's setting names ("bf16", "16-mixed", "no", "32-true", ...)."""
    value = value.lower()
    if "bf16" in value:
        return "bfloat16"
    if "16" in value:
        return "float16"
    return "float32" if value in ("no", "32", "32-true", "fp32") else value
