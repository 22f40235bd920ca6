"""Process one file: read, rewrite, and (unless only checking) write the result."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from amprewrite.engine import RewriteError, rewrite_source
from amprewrite.fileio import WriteRefused, write_atomically
from amprewrite.findings import Finding
from amprewrite.options import Options


class Status(enum.Enum):
    UNCHANGED = "unchanged"
    CHANGED = "changed"
    FAILED = "failed"


@dataclass
class FileOutcome:
    path: str  # as the user will see it
    status: Status
    findings: list[Finding] = field(default_factory=list)
    before: bytes = b""
    after: bytes = b""
    explicit: bool = True  # named on the command line (not found by walking a directory)


def process_source(path: str, source: bytes, options: Options, explicit: bool) -> FileOutcome:
    """Rewrite `source` in memory; never raises for a bad file."""
    try:
        result = rewrite_source(source, options)
    except RewriteError as exc:
        return FileOutcome(path, Status.FAILED, [exc.finding], source, source, explicit)
    except RecursionError:
        finding = Finding("AMP004", 1, 1, "source too deeply nested to rewrite; left unchanged")
        return FileOutcome(path, Status.FAILED, [finding], source, source, explicit)
    except Exception as exc:  # a bug in a rule must not lose the other files
        finding = Finding("AMP004", 1, 1, f"internal error ({type(exc).__name__}: {exc}); "
                          "file left unchanged, please report it")
        return FileOutcome(path, Status.FAILED, [finding], source, source, explicit)
    status = Status.CHANGED if result.changed else Status.UNCHANGED
    return FileOutcome(path, status, result.findings, source, result.source, explicit)


def process_file(path: Path, options: Options, write: bool, explicit: bool) -> FileOutcome:
    """Read `path`, rewrite it, and write it back in place when `write` and it changed."""
    shown = str(path)
    try:
        source = path.read_bytes()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        return FileOutcome(shown, Status.FAILED,
                           [Finding("AMP004", 1, 1, f"cannot read: {reason}")], explicit=explicit)
    outcome = process_source(shown, source, options, explicit)
    if write and outcome.status is Status.CHANGED:
        try:
            write_atomically(path, outcome.after)
        except (OSError, WriteRefused) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            outcome.status = Status.FAILED
            outcome.findings.append(Finding("AMP004", 1, 1, f"cannot write: {reason}; "
                                            "file left unchanged"))
    return outcome
