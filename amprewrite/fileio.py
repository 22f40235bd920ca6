"""Reading sources and writing results safely: compiled first, written atomically."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

TEMPORARY_SUFFIX = ".amprewrite"


class WriteRefused(Exception):
    """The file was not written, on purpose."""


class UnparsableOutput(WriteRefused):
    """The new source does not parse: a bug in the rewrite, never written."""


class ChangedOnDisk(WriteRefused):
    """The file no longer holds what was read: someone else changed it meanwhile."""


def read_source(path: Path) -> bytes:
    """The bytes of `path` (a symbolic link is followed); the engine decodes them."""
    if path.exists() and not path.is_file():  # a FIFO or a device could block or never end
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return path.read_bytes()


def check_compiles(path: Path, data: bytes) -> None:
    """A Python source must compile (`UnparsableOutput` otherwise)."""
    try:
        compile(data, str(path), "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:  # ValueError: NUL bytes, bad encoding declared
        detail = f"{type(exc).__name__}: {exc}"
        raise UnparsableOutput(f"the rewritten source does not parse ({detail})") from exc


def write_atomically(
    path: Path, data: bytes, expected: bytes | None = None,
    check: Callable[[Path, bytes], None] = check_compiles,
) -> None:
    """Replace the content of `path` with `data`, or raise and leave it as it was.

    `check(path, data)` must pass (a Python source must compile; a notebook, another check
    raising `UnparsableOutput`). When `expected` is given and the file no
    longer holds it, someone else changed it meanwhile: `ChangedOnDisk`. The data goes to a
    temporary file beside the target, is fsynced and given the target's mode, then renamed
    over it, so either the old or the new content is visible at every moment. A symbolic link
    is written through: the link stays, its target changes. A read-only file raises
    `PermissionError`, also for root.
    """
    check(path, data)
    target = path.resolve()
    mode = stat.S_IMODE(target.stat().st_mode)
    if not mode & 0o222 or not os.access(target, os.W_OK):
        raise PermissionError(errno.EACCES, "permission denied (read-only file)", str(path))
    if expected is not None and target.read_bytes() != expected:
        raise ChangedOnDisk("the file changed on disk while amprewrite was rewriting it")
    import tempfile  # imported here: --check and --diff write nothing, and start faster

    handle, temporary = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=TEMPORARY_SUFFIX
    )
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _fsync_directory(target.parent)


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable (best effort: not every platform allows it)."""
    with contextlib.suppress(OSError):
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
