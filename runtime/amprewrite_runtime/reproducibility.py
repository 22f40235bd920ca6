"""Seed every RNG and select deterministic kernels, for runs that repeat bit for bit.

    seeding = enable_reproducibility(0)
    loader = DataLoader(dataset, shuffle=True, num_workers=4, **seeding.as_kwargs())

What is (and is not) guaranteed: docs/reproducibility.md.
"""

from __future__ import annotations

import hashlib
import os
import random
import warnings
from dataclasses import dataclass
from typing import Any

import torch

ENV_CUBLAS = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_DETERMINISTIC = ":4096:8"
_SEED_LIMIT = 2**32  # numpy's seeds are 32-bit


def derive_seed(*parts: int) -> int:
    """A 64-bit seed mixed from `parts` (stable across processes, unlike `hash()`)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def seed_everything(seed: int) -> None:
    """Seed `random`, numpy (when installed) and torch on every device."""
    random.seed(seed)
    try:
        import numpy
    except ImportError:
        pass
    else:
        numpy.random.seed(seed % _SEED_LIMIT)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)  # torch.manual_seed does this too; explicit for CUDA


def current_rank() -> int:
    """The distributed rank: `torch.distributed` when initialised, else `RANK`, else 0."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank()
    return int(os.environ.get("RANK", "0"))


class WorkerSeeder:
    """A DataLoader `worker_init_fn`: seeds each worker from (seed, rank, worker id).

    The DataLoader's per-worker seed (drawn from the loader's seeded generator, new at every
    epoch) is mixed in too, so workers restarted at each epoch do not replay the same random
    augmentations. The rank is resolved when the worker starts, or when this object is pickled
    for a spawned worker (in the parent, where `torch.distributed` may be initialised).
    """

    def __init__(self, seed: int, rank: int | None = None) -> None:
        self.seed = seed
        self.rank = rank

    def __getstate__(self) -> dict[str, int]:
        return {"seed": self.seed, "rank": self._rank()}

    def __call__(self, worker_id: int) -> None:
        info = torch.utils.data.get_worker_info()
        loader_seed = info.seed if info is not None else 0
        seed_everything(derive_seed(self.seed, self._rank(), worker_id, loader_seed))

    def _rank(self) -> int:
        return current_rank() if self.rank is None else self.rank


@dataclass(frozen=True)
class DataLoaderSeeding:
    """What a DataLoader needs to shuffle and seed its workers reproducibly."""

    seed: int
    generator: torch.Generator
    worker_init_fn: WorkerSeeder

    def as_kwargs(self) -> dict[str, Any]:
        """`DataLoader(..., **seeding.as_kwargs())`."""
        return {"generator": self.generator, "worker_init_fn": self.worker_init_fn}


def enable_reproducibility(seed: int = 0, *, warn_only: bool = False) -> DataLoaderSeeding:
    """Seed every RNG, select deterministic algorithms, and return a DataLoader's seeding.

    `warn_only=True` makes an operation without a deterministic implementation warn instead
    of raising. Call it first thing: cuBLAS reads `CUBLAS_WORKSPACE_CONFIG` only once.
    """
    if not 0 <= seed < _SEED_LIMIT:
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
