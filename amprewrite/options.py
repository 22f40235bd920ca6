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
