"""The `amprewrite` command's entry point: the start-up cache first (`startup_cache`), so that
the classes the command line then creates, libcst's nodes among them, are served from it."""

from __future__ import annotations

import gc

# A rewrite allocates libcst's and `ast`'s trees by the hundred thousand, nearly all freed by
# their reference counts: with CPython's default threshold (700) the cycle collector runs
# thousands of times a file for little (measured: 2% of a rewrite's instructions).
_COLLECT_AFTER = 50_000


def entry_point() -> None:
    """`amprewrite ...` as `amprewrite.cli.entry_point` runs it, started faster."""
    from amprewrite import startup_cache

    startup_cache.install()
    from amprewrite.cli import entry_point as run

    gc.freeze()  # the modules' objects: never garbage, never scanned again
    gc.set_threshold(_COLLECT_AFTER, *gc.get_threshold()[1:])
    run()
