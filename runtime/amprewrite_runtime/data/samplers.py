"""Samplers for a reproducible, resumable data order, with no hidden RNG state.

The recipe (`make_batch_sampler`): shuffle first, repeat when training, shard after the repeat,
batch, skip last. Every shuffle is derived from (seed, epoch) alone, so the order of the whole
run is a pure function of its arguments, and a resumed run rebuilds it and skips what was
already trained: `skip` batches per rank (same world size and batch size), or `start` records
of the global stream (any world size or batch size). See docs/reproducibility.md.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sized
from typing import Literal, Protocol

import torch
from torch.utils.data import BatchSampler, Sampler, SequentialSampler

from amprewrite_runtime.data.seeding import derive_seed

Mode = Literal["training", "validation"]


class FiniteIndices(Protocol):
    """One epoch of indices: a sampler with a length (or a `range`)."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[int]: ...


class ReproducibleShuffleSampler(Sampler[int]):
    """A permutation of a sampler's indices (or of `range(n)`) derived from (seed, epoch)."""

    def __init__(self, sampler_or_len: FiniteIndices | int, seed: int) -> None:
        if isinstance(sampler_or_len, int):
            sampler_or_len = range(sampler_or_len)
        elif not isinstance(sampler_or_len, Sized):
            raise TypeError("shuffle a finite sampler, before any repeat (it would never end)")
        self.sampler = sampler_or_len
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def state_dict(self) -> dict[str, int]:
        return {"seed": self.seed, "epoch": self.epoch}

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Iterator[int]:
        indices = list(self.sampler)
        generator = torch.Generator().manual_seed(derive_seed(self.seed, self.epoch))
        order = torch.randperm(len(indices), generator=generator).tolist()
        return iter([indices[i] for i in order])


class RepeatSampler(Sampler[int]):
    """Repeats a finite sampler forever, calling its `set_epoch(epoch)` before each pass.

    `start` skips that many records of the repeated stream, once; whole epochs are skipped
    without being iterated. `epoch` is the pass the iteration has reached.
    """

    def __init__(self, sampler: FiniteIndices, start: int = 0) -> None:
        if not isinstance(sampler, Sized):
            raise TypeError("repeat a finite sampler (one epoch)")
        if len(sampler) == 0:
            raise ValueError("cannot repeat an empty sampler")
        if start < 0:
            raise ValueError(f"start must be >= 0, got {start}")
        self.sampler = sampler
        self.start = start
        self.epoch = start // len(sampler)

    def state_dict(self) -> dict[str, int]:
        return {"start": self.start, "epoch": self.epoch}

    def __iter__(self) -> Iterator[int]:
        epoch, offset = divmod(self.start, len(self.sampler))
        set_epoch = getattr(self.sampler, "set_epoch", None)
        while True:
            self.epoch = epoch
            if set_epoch is not None:
                set_epoch(epoch)
            yield from itertools.islice(self.sampler, offset, None)
            epoch, offset = epoch + 1, 0


class DistributedSampler(Sampler[int]):
    """Rank `rank`'s shard: every `num_replicas`-th index of a stream, from the `rank`-th.

    Sharding the repeated stream (not each epoch) keeps the global order independent of the
    world size: ranks together consume a prefix of it, whatever their number.
    """

    def __init__(self, sampler: Iterable[int], num_replicas: int, rank: int) -> None:
        if num_replicas < 1:
            raise ValueError(f"num_replicas must be >= 1, got {num_replicas}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, {num_replicas}), got {rank}")
        self.sampler = sampler
        self.num_replicas = num_replicas
        self.rank = rank

    def __len__(self) -> int:
        if not isinstance(self.sampler, Sized):
            raise TypeError("a repeated (infinite) stream has no length")
        return (len(self.sampler) - self.rank + self.num_replicas - 1) // self.num_replicas

    def __iter__(self) -> Iterator[int]:
        return itertools.islice(self.sampler, self.rank, None, self.num_replicas)


class SkipBatchSampler(Sampler[list[int]]):
    """Skips the first `skip` batches (at each `iter()`, so only once over a repeated stream)."""

    def __init__(self, batch_sampler: Iterable[list[int]], skip: int) -> None:
        if skip < 0:
            raise ValueError(f"skip must be >= 0, got {skip}")
        self.batch_sampler = batch_sampler
        self.skip = skip

    def state_dict(self) -> dict[str, int]:
        return {"skip": self.skip}

    def __len__(self) -> int:
        if not isinstance(self.batch_sampler, Sized):
            raise TypeError("a repeated (infinite) stream has no length")
        return max(0, len(self.batch_sampler) - self.skip)

    def __iter__(self) -> Iterator[list[int]]:
        return itertools.islice(self.batch_sampler, self.skip, None)


def make_batch_sampler(
    dataset_or_sampler: Sized,
    mode: Mode,
    seed: int,
    rank: int,
    num_replicas: int,
    batch_size: int,
    skip: int = 0,
    *,
    start: int = 0,
) -> Sampler[list[int]]:
    """Training: shuffle, repeat, shard, batch, skip. Validation: shard, batch.

    For `DataLoader(dataset, batch_sampler=...)`. To resume a training run, rebuild it with
    `skip` = the batches each rank already trained (same world size and batch size), or with
    `start` = the records all ranks together consumed (`batches * batch_size * num_replicas`,
    summed over the runs since the beginning), which allows a new world size or batch size.
    """
    if mode not in ("training", "validation"):
        raise ValueError(f"mode must be 'training' or 'validation', got {mode!r}")
    if mode == "validation" and (skip or start):
        raise ValueError("skip and start apply to training only")
    epoch: FiniteIndices = (
        dataset_or_sampler
        if isinstance(dataset_or_sampler, Sampler)
        else SequentialSampler(dataset_or_sampler)
    )
    stream: Iterable[int] = epoch
    if mode == "training":
        stream = RepeatSampler(ReproducibleShuffleSampler(epoch, seed), start)
    shard = DistributedSampler(stream, num_replicas, rank)
    batch_sampler = BatchSampler(shard, batch_size, drop_last=False)
    if mode == "training":
        return SkipBatchSampler(batch_sampler, skip)
    return batch_sampler
