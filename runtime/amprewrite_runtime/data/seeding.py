"""Seeds: mixed from parts, set in every RNG, and what a DataLoader needs to seed its shuffle
and its workers (`enable_reproducibility()` returns the latter)."""

from __future__ import annotations

import hashlib
import os
import random
from dataclasses import dataclass
from typing import Any

import torch

SEED_LIMIT = 2**32  # numpy's seeds are 32-bit


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
        numpy.random.seed(seed % SEED_LIMIT)
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
