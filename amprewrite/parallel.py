"""Processing many files: in parallel processes, results in input order, with a progress bar
on a terminal for long runs (its time left weighs the files by size)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import click

from amprewrite.discovery import Target
from amprewrite.options import Options
from amprewrite.progress import TimeLeft, weight
from amprewrite.runner import FileOutcome, process_file

if TYPE_CHECKING:
    from click._termui_impl import ProgressBar

_PROGRESS_FROM = 50  # files: below this a run is quick enough without a bar


def run_files(
    targets: list[Target], options: Options, write: bool, jobs: int | None, progress: bool
) -> list[FileOutcome]:
    work = partial(_process, options=options, write=write)
    workers = min(jobs or os.cpu_count() or 1, len(targets))
    if workers <= 1:
        results: Iterator[FileOutcome] = map(work, targets)
    else:
        from concurrent.futures import ProcessPoolExecutor  # a one-file run starts faster

        executor = ProcessPoolExecutor(max_workers=workers)
        results = executor.map(work, targets, chunksize=max(1, len(targets) // (workers * 8)))
    try:
        if progress and len(targets) >= _PROGRESS_FROM and sys.stderr.isatty():
            return _with_progress_bar(results, targets)
        return list(results)
    finally:
        if workers > 1:
            executor.shutdown()


def _with_progress_bar(results: Iterator[FileOutcome], targets: list[Target]) -> list[FileOutcome]:
    """The outcomes, while a bar on standard error shows the share of the bytes done and the
    time left (`progress.TimeLeft`)."""
    sizes = [_size(target.path) for target in targets]
    left = TimeLeft(sizes)
    started = time.monotonic()
    outcomes = []
    bar: ProgressBar[int]
    with click.progressbar(length=left.total, label="amprewrite", file=sys.stderr,
                           show_eta=False,
                           item_show_func=lambda _: left.label(time.monotonic() - started)
                           ) as bar:
        for outcome, size in zip(results, sizes, strict=True):
            left.advance(size)
            outcomes.append(outcome)
            bar.update(weight(size))
    return outcomes


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # reported when the file is read


def _process(target: Target, options: Options, write: bool) -> FileOutcome:
    return process_file(target.path, options, write, target.explicit)
