"""Seed every RNG and select deterministic kernels, for runs that repeat bit for bit.

    seeding = enable_reproducibility(0)
    loader = DataLoader(dataset, shuffle=True, num_workers=4, **seeding.as_kwargs())

What is (and is not) guaranteed: docs/reproducibility.md.
"""

from __future__ import annotations

import os
import warnings

import torch

from amprewrite_runtime.data.seeding import (
    SEED_LIMIT,
    DataLoaderSeeding,
    WorkerSeeder,
    seed_everything,
)

ENV_CUBLAS = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_DETERMINISTIC = ":4096:8"


def enable_reproducibility(seed: int = 0, *, warn_only: bool = False) -> DataLoaderSeeding:
    """Seed every RNG, select deterministic algorithms, and return a DataLoader's seeding.

    `warn_only=True` makes an operation without a deterministic implementation warn instead
    of raising. Call it first thing: cuBLAS reads `CUBLAS_WORKSPACE_CONFIG` only once.
    """
    if not 0 <= seed < SEED_LIMIT:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    if ENV_CUBLAS not in os.environ:
        os.environ[ENV_CUBLAS] = CUBLAS_DETERMINISTIC
        if torch.cuda.is_initialized():
            warnings.warn(
                f"enable_reproducibility() set {ENV_CUBLAS}={CUBLAS_DETERMINISTIC} after CUDA "
                "was initialised, too late for this process: cuBLAS may stay nondeterministic. "
                "Call it before any CUDA work, or set the variable before starting Python.",
                UserWarning,
                stacklevel=2,
            )
    seed_everything(seed)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    return DataLoaderSeeding(
        seed=seed,
        generator=torch.Generator().manual_seed(seed),
        worker_init_fn=WorkerSeeder(seed),
    )
