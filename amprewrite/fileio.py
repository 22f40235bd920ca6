"""Reading sources and writing results safely: re-parsed first, written atomically."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

import libcst as cst


class WriteRefused(Exception):
    """The new source does not parse: nothing was written."""


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data`: temporary file beside it, fsync, keep the mode, rename.

    A symbolic link is written through (the link stays, its target changes). Either the old
    or the new content is visible at every moment, also when the process is killed.
    """
    try:
        cst.parse_module(data)
    except cst.ParserSyntaxError as exc:
        raise WriteRefused(f"the rewritten source does not parse: {exc.message}") from exc
    target = path.resolve()
    mode = stat.S_IMODE(target.stat().st_mode)
    if not mode & 0o222 or not os.access(target, os.W_OK):  # read-only even for root
        raise PermissionError(f"permission denied (read-only file): {path}")
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                         suffix=".amprewrite")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
