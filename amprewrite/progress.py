"""The time left in a long run, for its progress bar.

A file's cost grows with its size (parsing and analysing are linear in it), and a directory
walk is sorted by path, not size: a repository's first files (`__init__.py`, small utilities)
can be a hundred times cheaper than its training scripts. Counting files finished would then
put the end of the run far too early; counting the bytes finished does not.
"""

from __future__ import annotations

import time

# What a file costs whatever its size (reading, compiling, reporting), as bytes of source: on
# 575 real training files, a file cost about 6 ms plus 6 ms per KB (docs/benchmarks.md).
FILE_COST_BYTES = 1024


class TimeLeft:
    """An estimate of the time a run has left, from the bytes its finished files held."""

    def __init__(self, sizes: list[int]) -> None:
        self.total = sum(map(weight, sizes))
        self.done = 0

    def advance(self, size: int) -> None:
        """A file of `size` bytes is finished."""
        self.done += weight(size)

    def seconds(self, elapsed: float) -> float | None:
        """Seconds left after `elapsed` seconds of work, or None before the first file."""
        if not self.done:
            return None
        return elapsed * (self.total - self.done) / self.done

    def label(self, elapsed: float) -> str:
        """`ETA 00:01:05` (hours, minutes, seconds), or nothing before the first file."""
        left = self.seconds(elapsed)
        return "" if left is None else "ETA " + time.strftime("%H:%M:%S", time.gmtime(left))


def weight(size: int) -> int:
    """The share of a run's work a file of `size` bytes is."""
    return size + FILE_COST_BYTES
