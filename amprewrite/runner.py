"""Process one file: read, rewrite, and (unless only checking) write the result.

A Python source goes through the engine; a notebook (`*.ipynb`) through `notebooks`, which
imports nbformat, so a run that meets no notebook never loads it. Nothing here raises for a
bad file: every failure becomes an AMP003/AMP004 finding on that file's outcome, so the
other files are still processed. The engine (and with it libcst) is imported on first use,
so the reporting modules that share `FileOutcome` load without it (`amprewrite --version`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from amprewrite.budget import OverBudget, over_time, time_budget
from amprewrite.fileio import (
    TooLarge,
    UnparsableOutput,
    WriteRefused,
    read_source,
    write_atomically,
)
from amprewrite.findings import CANNOT_PROCESS, Finding
from amprewrite.options import Options
from amprewrite.suppressions import options_for

if TYPE_CHECKING:
    from amprewrite.notebook_cells import NotebookCells

LEFT_ALONE = "file left unchanged"


class Status(enum.Enum):
    UNCHANGED = "unchanged"
    CHANGED = "changed"  # rewritten, or would be under --check/--diff
    FAILED = "failed"


@dataclass
class FileOutcome:
    """What happened to one file: its status, findings and contents."""

    path: str  # as the user will see it
    status: Status
    findings: list[Finding] = field(default_factory=list)
    before: bytes = b""
    after: bytes = b""
    explicit: bool = True  # named on the command line (not found by walking a directory)
    cells: NotebookCells | None = None  # a notebook's cell sources, before and after


def is_notebook(path: str) -> bool:
    """Whether `path` names a Jupyter notebook (`*.ipynb`)."""
    return path.lower().endswith(".ipynb")


def process_source(path: str, source: bytes, options: Options, explicit: bool) -> FileOutcome:
    """Rewrite `source` in memory (`after` is `source` itself unless it changed); a notebook
    when `path` names one."""
    options = options_for(options, path)
    if is_notebook(path):
        return _process_notebook(path, source, options, explicit)
    from amprewrite import engine

    try:
        with time_budget():
            result = engine.rewrite_source(source, options)
        if not isinstance(result.source, bytes):
            raise TypeError(f"the engine returned {type(result.source).__name__}, not bytes")
    except OverBudget:
        return FileOutcome(path, Status.UNCHANGED, [over_time()], source, source, explicit)
    except Exception as exc:
        return _failed(path, explicit, rewrite_failure(exc), source)
    changed = result.changed and result.source != source
    status = Status.CHANGED if changed else Status.UNCHANGED
    return FileOutcome(path, status, list(result.findings), source,
                       result.source if changed else source, explicit)


def _process_notebook(path: str, source: bytes, options: Options, explicit: bool) -> FileOutcome:
    from amprewrite.notebooks import rewrite_notebook

    try:
        with time_budget():
            result = rewrite_notebook(source, options)
    except OverBudget:
        return FileOutcome(path, Status.UNCHANGED, [over_time()], source, source, explicit)
    except Exception as exc:
        return _failed(path, explicit, rewrite_failure(exc), source)
    status = Status.CHANGED if result.changed else Status.UNCHANGED
    return FileOutcome(path, status, result.findings, source, result.source, explicit,
                       result.cells)


def process_file(path: Path, options: Options, write: bool, explicit: bool) -> FileOutcome:
    """Read `path`, rewrite it, and write it back in place when `write` and it changed."""
    from amprewrite import engine

    shown = str(path)
    try:
        source = read_source(path, None if is_notebook(shown) else engine.MAX_SOURCE_BYTES)
    except TooLarge as exc:  # not even read: a notebook's limit is on its code cells
        return FileOutcome(shown, Status.UNCHANGED, [engine.too_large(exc.size)],
                           explicit=explicit)
    except OSError as exc:
        return _failed(shown, explicit, Finding(CANNOT_PROCESS, 1, 1,
                                                f"cannot read: {_reason(exc)}"))
    except Exception as exc:
        return _failed(shown, explicit, _internal(exc))
    outcome = process_source(shown, source, options, explicit)
    if write and outcome.status is Status.CHANGED:
        try:
            if outcome.cells is not None:
                from amprewrite.notebook_json import check_json

                write_atomically(path, outcome.after, expected=source, check=check_json)
            else:
                write_atomically(path, outcome.after, expected=source)
        except Exception as exc:
            outcome.status = Status.FAILED
            outcome.after = source
            outcome.cells = None if outcome.cells is None else replace(
                outcome.cells, after=outcome.cells.before)
            outcome.findings.append(write_failure(exc))
    return outcome


def _failed(path: str, explicit: bool, finding: Finding, source: bytes = b"") -> FileOutcome:
    return FileOutcome(path, Status.FAILED, [finding], source, source, explicit)


def rewrite_failure(exc: Exception) -> Finding:
    """The finding for a rewrite that raised `exc`. The engine reports what the input's own
    syntax refuses (AMP003, a RewriteError); any other SyntaxError is a rule's (libcst's
    CSTValidationError for a node it built), an internal error (AMP004)."""
    from amprewrite.engine import RewriteError

    if isinstance(exc, RewriteError):
        return exc.finding
    if isinstance(exc, UnicodeError) or type(exc) is LookupError:  # LookupError: no codec
        return Finding(CANNOT_PROCESS, 1, 1, f"cannot decode ({type(exc).__name__}: {exc}); "
                       f"{LEFT_ALONE}")
    if isinstance(exc, RecursionError):
        return Finding(CANNOT_PROCESS, 1, 1, f"source too deeply nested to rewrite; {LEFT_ALONE}")
    if isinstance(exc, OSError):
        return Finding(CANNOT_PROCESS, 1, 1, f"cannot read: {_reason(exc)}")
    return _internal(exc)


def write_failure(exc: Exception) -> Finding:
    if isinstance(exc, UnparsableOutput):
        return Finding(CANNOT_PROCESS, 1, 1,
                       f"internal error: {exc}; {LEFT_ALONE}, please report it")
    if isinstance(exc, WriteRefused):
        return Finding(CANNOT_PROCESS, 1, 1, f"not written: {exc}; {LEFT_ALONE}")
    if isinstance(exc, OSError):
        return Finding(CANNOT_PROCESS, 1, 1, f"cannot write: {_reason(exc)}; {LEFT_ALONE}")
    return _internal(exc)


def _internal(exc: Exception) -> Finding:
    """A bug (in a rule or here) must cost one file, never the run."""
    return Finding(CANNOT_PROCESS, 1, 1, f"internal error ({type(exc).__name__}: {exc}); "
                   f"{LEFT_ALONE}, please report it")


def _reason(exc: OSError) -> str:
    """`Permission denied` -> `permission denied`; the user sees the path already."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    return reason[:1].lower() + reason[1:]
