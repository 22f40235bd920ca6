"""Which stream the report goes to and whether it is coloured.

The rewritten code and the report never share a stream: a machine-readable report goes to
standard output, unless `-` writes the rewritten code there, in which case it goes to standard
error (as ruff does). Colour follows no-color.org: `NO_COLOR` (set and not empty) turns it off,
`FORCE_COLOR` turns it on even off a terminal (as click and ruff read them).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

STDIN = "-"


def report_on_stderr(paths: tuple[str, ...], write: bool) -> bool:
    """Whether a machine-readable report goes to standard error: when `-` is rewritten, since
    standard output then carries the code."""
    return STDIN in paths and write


def colour(environ: Mapping[str, str] = os.environ) -> bool | None:
    """False with NO_COLOR, True with FORCE_COLOR, else None (coloured only on a terminal)."""
    if environ.get("NO_COLOR"):
        return False
    if environ.get("FORCE_COLOR"):
        return True
    return None
