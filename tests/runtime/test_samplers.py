"""Reproducible samplers: shuffles derived from (seed, epoch), sharding after the repeat that
partitions the stream for any world size, and resuming by batches or by global records."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Iterator

import pytest
from amprewrite_runtime.data import (
    DistributedSampler,
    RepeatSampler,
    ReproducibleShuffleSampler,
    SkipBatchSampler,
    make_batch_sampler,
)
from torch.utils.data import BatchSampler, Sampler, SequentialSampler

SEED = 7


def _take(iterable: Iterable[list[int]], n: int) -> list[list[int]]:
    return list(itertools.islice(iterable, n))


def _flat(batches: Iterable[list[int]]) -> list[int]:
    return [index for batch in batches for index in batch]


def _training(
    n: int, rank: int, num_replicas: int, batch_size: int, **resume: int
) -> Sampler[list[int]]:
    return make_batch_sampler(range(n), "training", SEED, rank, num_replicas, batch_size, **resume)


def _global_stream(n: int, length: int) -> list[int]:
    """The order of records with one rank and batches of one: what all ranks share."""
    return _flat(_take(_training(n, rank=0, num_replicas=1, batch_size=1), length))


def test_shuffle_is_a_permutation_derived_from_seed_and_epoch() -> None:
    sampler = ReproducibleShuffleSampler(SequentialSampler(range(50)), seed=SEED)
    first = list(sampler)
    assert sorted(first) == list(range(50))
    assert first != list(range(50))
    assert list(ReproducibleShuffleSampler(50, seed=SEED)) == first
    assert list(sampler) == first  # no hidden state: iterating again changes nothing
    sampler.set_epoch(1)
    assert list(sampler) != first
    assert sampler.state_dict() == {"seed": SEED, "epoch": 1}
    assert list(ReproducibleShuffleSampler(50, seed=SEED + 1)) != first


def test_shuffle_permutes_the_underlying_indices() -> None:
    assert sorted(ReproducibleShuffleSampler(range(10, 60, 10), seed=SEED)) == [10, 20, 30, 40, 50]


def test_shuffle_after_a_repeat_is_refused() -> None:
    with pytest.raises(TypeError, match="before any repeat"):
        ReproducibleShuffleSampler(RepeatSampler(range(3)), seed=SEED)  # type: ignore[arg-type]


def test_repeat_reshuffles_each_epoch() -> None:
    shuffle = ReproducibleShuffleSampler(10, seed=SEED)
    repeat = RepeatSampler(shuffle)
    stream = list(itertools.islice(repeat, 30))
    epochs = [stream[0:10], stream[10:20], stream[20:30]]
    assert all(sorted(epoch) == list(range(10)) for epoch in epochs)
    assert epochs[0] != epochs[1] != epochs[2]
    assert repeat.state_dict() == {"start": 0, "epoch": 2}
    assert shuffle.epoch == 2


def test_repeat_start_skips_records_once_and_whole_epochs_directly() -> None:
    full = list(itertools.islice(RepeatSampler(ReproducibleShuffleSampler(10, SEED)), 60))
    for start in (0, 3, 10, 27):
        resumed = RepeatSampler(ReproducibleShuffleSampler(10, SEED), start=start)
        assert resumed.epoch == start // 10
        assert list(itertools.islice(resumed, 60 - start)) == full[start:]


@pytest.mark.parametrize("sampler", [range(0), RepeatSampler(range(3))])
def test_repeat_needs_a_finite_nonempty_sampler(sampler: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        RepeatSampler(sampler)  # type: ignore[arg-type]


def test_distributed_sampler_takes_every_nth_from_rank() -> None:
    shards = [list(DistributedSampler(range(10), 4, rank)) for rank in range(4)]
    assert shards == [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]
    assert [len(DistributedSampler(range(10), 4, rank)) for rank in range(4)] == [3, 3, 2, 2]
    assert _take(DistributedSampler(itertools.count(), 3, 2), 3) == [2, 5, 8]
    with pytest.raises(TypeError, match="no length"):
        len(DistributedSampler(itertools.count(), 3, 2))


@pytest.mark.parametrize(("num_replicas", "rank"), [(0, 0), (2, 2), (2, -1)])
def test_distributed_sampler_rejects_bad_ranks(num_replicas: int, rank: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        DistributedSampler(range(4), num_replicas, rank)


def test_skip_batch_sampler_skips_at_each_iteration() -> None:
    batches = BatchSampler(range(10), 3, drop_last=False)
    skipping = SkipBatchSampler(batches, 2)
    assert list(skipping) == [[6, 7, 8], [9]]
    assert list(skipping) == [[6, 7, 8], [9]]
    assert len(skipping) == 2
    assert len(SkipBatchSampler(batches, 9)) == 0
    assert skipping.state_dict() == {"skip": 2}


@pytest.mark.parametrize("num_replicas", [1, 2])
def test_resuming_with_skip_sees_the_batches_of_the_uninterrupted_run(num_replicas: int) -> None:
    for rank in range(num_replicas):
        uninterrupted = _take(_training(10, rank, num_replicas, batch_size=3), 12)
        for k in (1, 4, 7):  # resume points inside and across epoch boundaries
            before = _take(_training(10, rank, num_replicas, batch_size=3), k)
            after = _take(_training(10, rank, num_replicas, batch_size=3, skip=k), 12 - k)
            assert before + after == uninterrupted


@pytest.mark.parametrize("num_replicas", [1, 2, 4])
def test_shards_partition_each_epoch(num_replicas: int) -> None:
    n, batch_size = 12, 3
    per_epoch = n // (batch_size * num_replicas)
    shards = [
        _take(_training(n, rank, num_replicas, batch_size), 2 * per_epoch)
        for rank in range(num_replicas)
    ]
    for epoch in range(2):
        window = [shard[epoch * per_epoch : (epoch + 1) * per_epoch] for shard in shards]
        assert sorted(_flat(_flat(window))) == list(range(n))


@pytest.mark.parametrize("num_replicas", [1, 2, 4])
def test_validation_shards_partition_the_dataset(num_replicas: int) -> None:
    seen = [
        _flat(make_batch_sampler(range(10), "validation", SEED, rank, num_replicas, 3))
        for rank in range(num_replicas)
    ]
    assert sorted(_flat(seen)) == list(range(10))


def _resumed_with_new_world_size(n: int) -> tuple[list[int], int]:
    """2 ranks train 4 batches of 3, then 4 ranks resume with batches of 2 for 5 batches."""
    first = [_flat(_take(_training(n, rank, 2, 3), 4)) for rank in range(2)]
    consumed = 4 * 3 * 2
    second = [_flat(_take(_training(n, rank, 4, 2, start=consumed), 5)) for rank in range(4)]
    return _flat(first + second), consumed + 5 * 2 * 4


def test_new_world_size_neither_repeats_nor_drops_records_across_epochs() -> None:
    records, total = _resumed_with_new_world_size(10)
    assert len(records) == total == 64
    assert Counter(records) == Counter(_global_stream(10, total))


def test_new_world_size_neither_repeats_nor_drops_records_within_an_epoch() -> None:
    records, total = _resumed_with_new_world_size(1000)
    assert len(set(records)) == len(records) == total
    assert set(records) == set(_global_stream(1000, total))


def test_start_at_the_same_world_size_equals_skip() -> None:
    for rank in range(2):
        by_batches = _take(_training(10, rank, 2, 3, skip=5), 6)
        by_records = _take(_training(10, rank, 2, 3, start=5 * 3 * 2), 6)
        assert by_batches == by_records


@pytest.mark.parametrize(
    ("mode", "resume"), [("testing", {}), ("validation", {"skip": 1}), ("validation", {"start": 3})]
)
def test_make_batch_sampler_rejects_bad_arguments(mode: str, resume: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=r"mode|training only"):
        make_batch_sampler(range(4), mode, SEED, 0, 1, 2, **resume)  # type: ignore[arg-type]


class _Evens(Sampler[int]):
    def __len__(self) -> int:
        return 5

    def __iter__(self) -> Iterator[int]:
        return iter(range(0, 10, 2))


def test_make_batch_sampler_shuffles_a_given_sampler() -> None:
    batches = _take(make_batch_sampler(_Evens(), "training", SEED, 0, 1, 5), 2)
    assert sorted(batches[0]) == sorted(batches[1]) == [0, 2, 4, 6, 8]
    assert batches[0] != batches[1]
