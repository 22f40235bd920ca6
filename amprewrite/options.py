"""What the user asked for: opt level, dtype and output style."""

from __future__ import annotations

from dataclasses import dataclass

OPT_LEVELS = ("O0", "O1", "O2", "O3")
DTYPES = ("float16", "bfloat16")


@dataclass(frozen=True)
class Options:
    opt_level: str = "O1"
    dtype: str | None = None  # None: the runtime picks (float16 on CUDA, bfloat16 on the CPU)
    plain: bool = False  # emit torch.amp only, no runtime import


def validate(options: Options) -> str | None:
    """Why `options` cannot be used (an explanation for the user), or None."""
    if options.opt_level not in OPT_LEVELS:
        return f"unknown opt level {options.opt_level!r}; choose one of {', '.join(OPT_LEVELS)}"
    if options.opt_level in ("O2", "O3"):
        return (f"opt level {options.opt_level} (model casting and master weights) is not "
                "supported yet; use O1")
    if options.dtype is not None and options.dtype not in DTYPES:
        return f"unknown dtype {options.dtype!r}; choose one of {', '.join(DTYPES)}"
    return None
