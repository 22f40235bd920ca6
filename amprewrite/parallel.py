"""Processing many files: in parallel processes, results in input order, with a progress bar
on a terminal for long runs."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from functools import partial

import click

from amprewrite.discovery import Target
from amprewrite.options import Options
from amprewrite.runner import FileOutcome, process_file

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
            with click.progressbar(results, length=len(targets), label="amprewrite",
                                   file=sys.stderr) as bar:
                return list(bar)
        return list(results)
    finally:
        if workers > 1:
            executor.shutdown()


def _process(target: Target, options: Options, write: bool) -> FileOutcome:
    return process_file(target.path, options, write, target.explicit)
