"""The progress bar's time left, against the truth of synthetic runs."""

from __future__ import annotations

import random

import pytest

from amprewrite.progress import FILE_COST_BYTES, TimeLeft

PER_FILE = 0.003  # seconds: read, compile, report (a run of real files: about 6 ms)
PER_BYTE = 5e-6  # seconds: parse and analysis (about 6 ms per KB)


def _worst_error(sizes: list[int]) -> float:
    """The largest factor between the estimate and the truth, from the first tenth of the
    files on, for files whose cost is a constant plus a part proportional to their size."""
    costs = [PER_FILE + PER_BYTE * size for size in sizes]
    left = TimeLeft(sizes)
    elapsed, worst = 0.0, 1.0
    for done, (size, cost) in enumerate(zip(sizes, costs, strict=True), start=1):
        elapsed += cost
        left.advance(size)
        truth = sum(costs[done:])
        if done >= len(sizes) / 10 and done < len(sizes):
            guess = left.seconds(elapsed)
            assert guess is not None
            worst = max(worst, guess / truth, truth / guess)
    return worst


def test_small_files_first_do_not_fool_the_estimate() -> None:
    """A walk sorted by path: 40 `__init__.py` and small utilities, then 160 training scripts
    a hundred times their size (counting files, the estimate would be 30x too short)."""
    sizes = [300] * 40 + [30_000] * 160
    assert _worst_error(sizes) < 2


def test_sizes_growing_along_the_walk() -> None:
    assert _worst_error([500 * (1 + i) for i in range(200)]) < 2


@pytest.mark.parametrize("seed", range(5))
def test_sizes_in_random_order(seed: int) -> None:
    rng = random.Random(seed)
    sizes = [int(rng.lognormvariate(9, 1.2)) for _ in range(200)]
    assert _worst_error(sizes) < 2


def test_nothing_is_estimated_before_the_first_file() -> None:
    left = TimeLeft([0, FILE_COST_BYTES])
    assert left.seconds(0.5) is None and left.label(0.5) == ""
    left.advance(0)
    assert left.seconds(1.0) == pytest.approx(2.0)
    assert left.label(1.0) == "ETA 00:00:02"
