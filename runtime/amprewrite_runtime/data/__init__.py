"""Reproducible data loading: DataLoader seeding, and samplers with no hidden RNG state.

    from amprewrite_runtime.data import make_batch_sampler

See docs/reproducibility.md.
"""

from amprewrite_runtime.data.samplers import (
    DistributedSampler,
    RepeatSampler,
    ReproducibleShuffleSampler,
    SkipBatchSampler,
    make_batch_sampler,
)
from amprewrite_runtime.data.seeding import DataLoaderSeeding, WorkerSeeder

__all__ = [
    "DataLoaderSeeding",
    "DistributedSampler",
    "RepeatSampler",
    "ReproducibleShuffleSampler",
    "SkipBatchSampler",
    "WorkerSeeder",
    "make_batch_sampler",
]
