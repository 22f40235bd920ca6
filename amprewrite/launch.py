"""The `amprewrite` command's entry point: the start-up cache first (`startup_cache`), so that
the classes the command line then creates, libcst's nodes among them, are served from it."""

from __future__ import annotations


def entry_point() -> None:
    """`amprewrite ...` as `amprewrite.cli.entry_point` runs it, started faster."""
    from amprewrite import startup_cache

    startup_cache.install()
    from amprewrite.cli import entry_point as run

    run()
