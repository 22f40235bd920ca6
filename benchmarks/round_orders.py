"""The order variants run in, round by round, in the benchmarks that time them side by side.

A plain rotation (ABC, BCA, CAB) keeps each variant's predecessor: B always runs right after
A, and inherits whatever A leaves behind (a hot GPU, a fragmented allocator, a cold cache).
Rotations alternated with their reverses (ABC, CBA, BCA, ACB, CAB, BAC for three) run every
variant first, last and right after each other one equally often over 2n rounds.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence


def orders(variants: Sequence[str], repeats: int) -> Iterator[list[str]]:
    """`repeats` orders of `variants`: a rotation, then its reverse, then the next rotation."""
    for index in range(repeats):
        shift = (index // 2) % len(variants)
        rotation = [*variants[shift:], *variants[:shift]]
        yield rotation[::-1] if index % 2 else rotation
