"""A project group's renames, journaled: a run killed between two of them (SIGKILL, a power
cut) leaves its journal in the project root, and the next run that writes the project
completes the group before it reads a file.

The journal is written and fsynced after every file of the group is staged (written and
fsynced beside its target) and before the first rename; it is removed once the renames are
done or undone. A file the journal names is completed only while it still holds what the run
read and its staged file what the run wrote; anything else is left as it is.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from amprewrite.catalog import NOTE, declare
from amprewrite.fileio import fsync_directory
from amprewrite.findings import Finding

GROUP_COMPLETED = declare(
    "AMP010", NOTE, "interrupted rewrite of linked files completed",
    "A run was killed while it renamed the rewritten files of one training step into place: "
    "this run renamed the rest (each only where it still held what that run read) before "
    "anything else, so the group is whole again.",
    why=(
        "An earlier run was killed while it renamed the rewritten files of one training "
        "step into place, and left its journal in the project root."
    ),
    example=(
        "$ amprewrite project   # killed (SIGKILL) between two renames\n"
        "$ amprewrite project   # renames the rest first: AMP010"
    ),
)

_PREFIX = ".amprewrite-journal-"


@dataclass(frozen=True)
class Entry:
    """One file of a group: where its new content is staged, and digests of both."""

    target: str
    temporary: str
    before: str  # sha256 of the content the run read
    after: str  # sha256 of the content it staged


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def begin(root: Path, entries: list[Entry]) -> Path:
    """Write the journal of a group about to be renamed, durably; its path."""
    key = digest("\n".join(sorted(entry.target for entry in entries)).encode())[:16]
    journal = root / f"{_PREFIX}{key}.json"
    with open(journal, "wb") as stream:
        stream.write(json.dumps([asdict(entry) for entry in entries]).encode())
        stream.flush()
        os.fsync(stream.fileno())
    fsync_directory(root)
    return journal


def end(journal: Path) -> None:
    """The group is whole (renamed, or put back): its journal goes."""
    with contextlib.suppress(OSError):
        journal.unlink()


def recover(root: Path) -> list[tuple[Path, list[Path]]]:
    """Complete the groups whose journals lie in `root`: each journal that completed files,
    and those files."""
    found = []
    for journal in sorted(root.glob(f"{_PREFIX}*.json")):
        try:
            entries = [Entry(**entry) for entry in json.loads(journal.read_bytes())]
        except (OSError, ValueError, TypeError):  # torn while written: no rename had started
            entries = []
        completed = [Path(entry.target) for entry in entries if _complete(entry)]
        end(journal)
        if completed:
            found.append((journal, completed))
    return found


def completed(files: list[str]) -> Finding:
    return Finding(GROUP_COMPLETED, 1, 1, f"interrupted rewrite completed: {', '.join(files)}")


def _complete(entry: Entry) -> bool:
    """Rename the staged file over its target when both are as the run left them."""
    target, temporary = Path(entry.target), Path(entry.temporary)
    try:
        ready = (digest(target.read_bytes()) == entry.before
                 and digest(temporary.read_bytes()) == entry.after)
        if ready:
            os.replace(temporary, target)
            return True
    except OSError:
        pass
    with contextlib.suppress(OSError):
        temporary.unlink()
    return False

