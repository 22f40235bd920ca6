"""enable_reproducibility(): bitwise-identical training runs (with and without DataLoader
workers), distinct worker seeds per worker and rank, resumable data order, and the global
settings it changes (restored after each test)."""

from __future__ import annotations

import itertools
import os
import pickle
import random
import sys
import types
import warnings
from collections.abc import Iterator

import pytest
import torch
from amprewrite_runtime.data import WorkerSeeder, make_batch_sampler
from amprewrite_runtime.reproducibility import ENV_CUBLAS, enable_reproducibility
from torch.utils.data import DataLoader, Dataset


@pytest.fixture(autouse=True)
def restore_global_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(ENV_CUBLAS, raising=False)  # restored at teardown
    monkeypatch.delenv("RANK", raising=False)
    deterministic = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    cudnn = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    random_state, torch_state = random.getstate(), torch.get_rng_state()
    yield
    torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = cudnn
    random.setstate(random_state)
    torch.set_rng_state(torch_state)


class NoisyDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Synthetic regression data with per-item noise from `random` and torch, as augmentations
    draw it (in the DataLoader worker when there are workers)."""

    def __init__(self, n: int = 48) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 6, generator=generator)
        self.y = self.x.sum(dim=1, keepdim=True)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        noise = 0.1 * torch.randn(6) + random.gauss(0.0, 0.1)
        return self.x[index] + noise, self.y[index]


class DrawsDataset(Dataset[tuple[int, float, float]]):
    """What each worker draws from `random` and torch."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> tuple[int, float, float]:
        info = torch.utils.data.get_worker_info()
        worker = info.id if info is not None else -1
        return worker, random.random(), torch.rand(()).item()


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1)
    )


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: list) -> float:
    x, y = batch
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


def _train(seed: int, num_workers: int, epochs: int = 2) -> list[float]:
    seeding = enable_reproducibility(seed)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(
        NoisyDataset(), batch_size=8, shuffle=True, num_workers=num_workers, **seeding.as_kwargs()
    )
    return [_step(model, optimizer, batch) for _ in range(epochs) for batch in loader]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_two_runs_give_bitwise_identical_losses(num_workers: int) -> None:
    first = _train(123, num_workers)
    assert _train(123, num_workers) == first
    assert _train(124, num_workers) != first


def _draws(seed: int) -> list[list[tuple[int, float, float]]]:
    """Per epoch, the (worker, random draw, torch draw) of each item, with two workers."""
    seeding = enable_reproducibility(seed)
    loader = DataLoader(DrawsDataset(), batch_size=None, num_workers=2, **seeding.as_kwargs())
    return [[(int(w), float(r), float(t)) for w, r, t in loader] for _ in range(2)]


def test_workers_draw_distinct_reproducible_streams_per_worker_epoch_and_rank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    draws = _draws(5)
    assert _draws(5) == draws
    for epoch in draws:
        by_worker = [[d[1:] for d in epoch if d[0] == worker] for worker in (0, 1)]
        assert by_worker[0] and by_worker[1]
        assert by_worker[0] != by_worker[1]
    assert draws[0] != draws[1]  # restarted workers do not replay the previous epoch
    monkeypatch.setenv("RANK", "1")
    assert _draws(5) != draws


def test_worker_seed_depends_on_seed_rank_and_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    def seed_after(seeder: WorkerSeeder, worker_id: int) -> int:
        seeder(worker_id)
        return torch.initial_seed()

    seeder = enable_reproducibility(3).worker_init_fn
    seeds = {seed_after(seeder, 0), seed_after(seeder, 1), seed_after(WorkerSeeder(4), 0)}
    monkeypatch.setenv("RANK", "2")
    seeds.add(seed_after(seeder, 0))
    assert len(seeds) == 4
    assert seed_after(WorkerSeeder(3, rank=2), 0) in seeds


def test_worker_init_fn_pickles_with_the_rank_of_the_parent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RANK", "3")
    seeder = pickle.loads(pickle.dumps(enable_reproducibility(9).worker_init_fn))
    monkeypatch.delenv("RANK")
    assert (seeder.seed, seeder.rank) == (9, 3)


def test_as_kwargs_and_a_seeded_generator() -> None:
    seeding = enable_reproducibility(11)
    assert seeding.as_kwargs() == {
        "generator": seeding.generator,
        "worker_init_fn": seeding.worker_init_fn,
    }
    expected = torch.randperm(20, generator=torch.Generator().manual_seed(11))
    assert torch.equal(torch.randperm(20, generator=seeding.generator), expected)


def test_seeds_random_numpy_and_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    numpy_seeds: list[int] = []
    fake_numpy = types.SimpleNamespace(random=types.SimpleNamespace(seed=numpy_seeds.append))
    monkeypatch.setitem(sys.modules, "numpy", fake_numpy)
    enable_reproducibility(42)
    draws = random.random(), torch.rand(3)
    enable_reproducibility(42)
    assert random.random() == draws[0]
    assert torch.equal(torch.rand(3), draws[1])
    assert numpy_seeds == [42, 42]


@pytest.mark.parametrize("warn_only", [False, True])
def test_selects_deterministic_algorithms(warn_only: bool) -> None:
    enable_reproducibility(0, warn_only=warn_only)
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.is_deterministic_algorithms_warn_only_enabled() is warn_only
    assert torch.backends.cudnn.deterministic
    assert not torch.backends.cudnn.benchmark


def test_sets_the_cublas_workspace_config_without_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        enable_reproducibility()
    assert os.environ[ENV_CUBLAS] == ":4096:8"


def test_keeps_a_cublas_workspace_config_already_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_CUBLAS, ":16:8")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        enable_reproducibility()
    assert os.environ[ENV_CUBLAS] == ":16:8"


def test_warns_when_cuda_is_already_initialised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.warns(UserWarning, match="too late for this process"):
        enable_reproducibility()


@pytest.mark.parametrize("seed", [-1, 2**32])
def test_rejects_seeds_numpy_cannot_take(seed: int) -> None:
    with pytest.raises(ValueError, match="seed must be"):
        enable_reproducibility(seed)


def _train_from(
    start_batch: int, stop_batch: int, checkpoint: dict | None
) -> tuple[list[list[int]], list[float], dict]:
    """Train batches [start_batch, stop_batch) from a checkpoint (or from scratch)."""
    seeding = enable_reproducibility(1)
    dataset = NoisyDataset()
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        torch.set_rng_state(checkpoint["torch_rng"])
        random.setstate(checkpoint["random_rng"])
    batch_sampler = make_batch_sampler(dataset, "training", 1, 0, 1, 10, skip=start_batch)
    steps = stop_batch - start_batch
    indices = list(itertools.islice(batch_sampler, steps))  # iterating again gives the same
    # The seeded generator also keeps the loader from drawing its base seed from torch's RNG.
    loader = DataLoader(dataset, batch_sampler=batch_sampler, **seeding.as_kwargs())
    losses = [_step(model, optimizer, batch) for batch in itertools.islice(loader, steps)]
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "random_rng": random.getstate(),
    }
    return indices, losses, state


def test_stopped_and_resumed_run_matches_the_uninterrupted_run() -> None:
    k, total = 7, 12  # 48 records in batches of 10: the resume point is mid-epoch
    batches, losses, final = _train_from(0, total, None)
    batches_before, losses_before, checkpoint = _train_from(0, k, None)
    batches_after, losses_after, resumed = _train_from(k, total, checkpoint)
    assert batches_before + batches_after == batches
    assert losses_before + losses_after == losses
    for name, tensor in final["model"].items():
        assert torch.equal(resumed["model"][name], tensor)
