"""Reading sources and writing results safely: compiled first, written atomically."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

TEMPORARY_SUFFIX = ".amprewrite"


class WriteRefused(Exception):
    """The file was not written, on purpose."""


class UnparsableOutput(WriteRefused):
    """The new source does not parse: a bug in the rewrite, never written."""


class ChangedOnDisk(WriteRefused):
    """The file no longer holds what was read: someone else changed it meanwhile."""


class TooLarge(OSError):
    """A file over the size a caller would read; `size` is its size in bytes."""

    def __init__(self, path: Path, size: int) -> None:
        super().__init__(errno.EFBIG, "file too large", str(path))
        self.size = size


def read_source(path: Path, limit: int | None = None) -> bytes:
    """The bytes of `path` (a symbolic link is followed); the engine decodes them. Anything
    but a regular file (a FIFO or a device could block or never end) raises `OSError`
    without being read: it is opened non-blocking, and only after `stat` says it is one. A
    file over `limit` bytes raises `TooLarge`, unread."""
    status = os.stat(path)
    if not stat.S_ISREG(status.st_mode):
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    if limit is not None and status.st_size > limit:
        raise TooLarge(path, status.st_size)
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(descriptor, "rb") as stream:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):  # replaced since the `stat`
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return stream.read()


def resolved(path: Path) -> Path:
    """Where `path` really is, or its absolute form when it cannot be resolved (a symbolic
    link loop, which Python 3.11's `resolve` refuses with `RuntimeError`)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return path.absolute()


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
    raising `UnparsableOutput`). The data goes to a temporary file beside the target, is
    fsynced and given the target's mode (`stage`); then, when `expected` is given, the file
    must still hold it (else someone saved it meanwhile: `ChangedOnDisk`, and the temporary
    file is removed), and only then is it renamed over the target (`Staged.commit`), so
    either the old or the new content is visible at every moment, and a save is lost only
    when it lands between that last comparison and the rename (microseconds, not the time a
    write and an fsync take). A symbolic link is written through: the link stays, its target
    changes. A read-only file raises `PermissionError`, also for root.
    """
    stage(path, data, check).commit(expected)


@dataclass(frozen=True)
class Staged:
    """New content written and fsynced beside its target, not in place yet."""

    target: Path  # the file it replaces (a symbolic link resolved)
    temporary: str

    def commit(self, expected: bytes | None = None) -> None:
        """Rename it over the target, which must still hold `expected` when given
        (`ChangedOnDisk` otherwise); on any failure the temporary file is removed."""
        try:
            if expected is not None and not _holds(self.target, expected):
                raise ChangedOnDisk("the file changed on disk while amprewrite was rewriting it")
            os.replace(self.temporary, self.target)
        except BaseException:
            self.discard()
            raise
        fsync_directory(self.target.parent)

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.temporary)


def stage(
    path: Path, data: bytes, check: Callable[[Path, bytes], None] = check_compiles
) -> Staged:
    """`data`, checked, in a temporary file beside `path`'s target, fsynced, with its mode."""
    check(path, data)
    target = path.resolve()
    mode = stat.S_IMODE(target.stat().st_mode)
    if not mode & 0o222 or not os.access(target, os.W_OK):
        raise PermissionError(errno.EACCES, "permission denied (read-only file)", str(path))
    import tempfile  # imported here: --check and --diff write nothing, and start faster

    handle, temporary = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=TEMPORARY_SUFFIX
    )
    staged = Staged(target, temporary)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)
    except BaseException:
        staged.discard()
        raise
    return staged


def _holds(target: Path, expected: bytes) -> bool:
    """Whether `target` holds `expected`, and did not change while being read."""
    before = os.stat(target)
    if before.st_size != len(expected):
        return False
    data = target.read_bytes()
    after = os.stat(target)
    return data == expected and (before.st_mtime_ns, before.st_size) == (
        after.st_mtime_ns, after.st_size)


def fsync_directory(directory: Path) -> None:
    """Make the rename itself durable (best effort: not every platform allows it)."""
    with contextlib.suppress(OSError):
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
