"""A time budget per file: a rewrite still running when it runs out is abandoned, and the file
is left unchanged with a finding (AMP009), so that no input can hold a run for minutes.

The budget counts the process's CPU time (user and system), not the clock's: on a loaded
machine a file gets the same verdict as on a quiet one, since the verdict depends on the input
only. It is a SIGPROF timer, so it acts in the main thread of a POSIX process (the command,
and each worker of `--jobs`), between Python bytecodes: a call into libcst's native parser
finishes first. Elsewhere (another thread, Windows, SIGPROF already in use, by a profiler say)
there is none.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from amprewrite.catalog import SKIP, declare
from amprewrite.findings import Finding

SECONDS_PER_FILE = 60.0  # a real training script takes well under a second

OVER_TIME = declare(
    "AMP009", SKIP, "file took too long to rewrite",
    "The rewrite of one file is abandoned after 60 seconds of CPU time "
    "(`budget.SECONDS_PER_FILE`; the clock's time does not count, so a loaded machine gives "
    "the verdict a quiet one gives) and "
    "the file left unchanged: an input this slow is generated or pathological (a real "
    "training script takes well under a second). Please report it.",
    why="Rewriting the file took more than its budget of 60 seconds of CPU time.",
    example=(
        "# a generated source whose rewrite runs past 60 seconds of CPU time\n"
        "# train.py:1:1: AMP009 ... file left unchanged"
    ),
)


class OverBudget(BaseException):
    """The budget ran out. A BaseException, as KeyboardInterrupt: no `except Exception` on
    the way may swallow it and go on with half of a file's facts."""


@contextlib.contextmanager
def time_budget(files: int = 1) -> Iterator[None]:
    """Raise OverBudget in the block once it has used the CPU time of `files` files' budget
    (where a timer can)."""
    if not _timer_free():
        yield
        return

    def expire(number: int, frame: object) -> None:
        raise OverBudget

    previous = signal.signal(signal.SIGPROF, expire)
    signal.setitimer(signal.ITIMER_PROF, SECONDS_PER_FILE * files)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def _timer_free() -> bool:
    return (hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGPROF) in (signal.SIG_DFL, None)
            and signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0))


def over_time(files: int = 1) -> Finding:
    """The finding on a file whose rewrite (with `files` files in all) ran out of time."""
    return Finding(OVER_TIME, 1, 1, f"rewrite abandoned after {SECONDS_PER_FILE * files:g} "
                   "seconds of CPU time; file left unchanged")
