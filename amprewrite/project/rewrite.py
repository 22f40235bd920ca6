"""Rewrite a project's linked modules together, all or nothing.

Every module of a group is parsed, analysed and linked (`links`), then rewritten by the
engine with its links; each result compiles before anything is written. When one module
cannot be rewritten, or a named file's rewrite needs an edit in a module that was not named
(pre-commit names only the staged files), no file of the group changes, and a finding says
which other file is in the way.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

from amprewrite import engine
from amprewrite.analysis import ModuleAnalysis
from amprewrite.budget import OverBudget, over_time, time_budget
from amprewrite.catalog import CHANGE, ERROR, SKIP, declare
from amprewrite.fileio import Staged, stage, write_atomically
from amprewrite.findings import Finding
from amprewrite.options import Options
from amprewrite.project import journal
from amprewrite.project.layout import project_root
from amprewrite.project.links import LinkedModule, link_group
from amprewrite.project.program import Program, load_program, shown_path
from amprewrite.protocol.invariants import REJECTIONS
from amprewrite.recipes import choose
from amprewrite.rules.revert_to_fp32 import REVERT_WOULD_BREAK
from amprewrite.runner import FileOutcome, Status, rewrite_failure, write_failure
from amprewrite.steering import WITHHELD
from amprewrite.suppressions import options_for

NEEDS_UNNAMED_FILE = declare(
    "AMP450", ERROR, "the training step continues in a file that was not named",
    "The rewrite would thread the grad scaler into (or out of) a project module that is not "
    "among the files given, so nothing was changed: run amprewrite on both files, or on the "
    "directory. It fails the run (and the pre-commit hooks, which pass only the staged "
    "files) rather than leave a training step half rewritten.",
    why="The training step continues in a project module that is not among the files given.",
    example=(
        "$ amprewrite main.py   # engine.py steps the optimizer main.py builds\n"
        "# main.py:1:1: AMP450 ... run amprewrite on both files, or on the directory"
    ),
)

LINKED_FILE_FAILED = declare(
    "AMP451", ERROR, "not rewritten: a linked file cannot be rewritten",
    "The files one training step spans are rewritten together or not at all: fix the file "
    "named in the message (its own finding says why) and run again.",
    why="Another file of the same training step cannot be rewritten, so none of them is.",
    example=(
        "$ amprewrite project   # engine.py has a syntax error\n"
        "# main.py:1:1: AMP451 not rewritten: a linked file cannot be rewritten"
    ),
)

LINKED_FILE_REJECTED = declare(
    "AMP452", SKIP, "not rewritten: the rewrite of a linked file was rejected",
    "The files one training step spans are rewritten together or not at all: the protocol "
    "check rejected part of the rewrite of the file named in the message (its AMP7xx finding "
    "says where), so every file of the step is left as it was.",
    why="The protocol check rejected the rewrite of another file of the same training step.",
    example=(
        "$ amprewrite project\n"
        "# engine.py:40:9: AMP706 gradients are read or changed here before ...\n"
        "# main.py:1:1: AMP452 not rewritten: the rewrite of a linked file was rejected"
    ),
)

LINKED_REVERT_REFUSED = declare(
    "AMP428", SKIP, "not reverted at O0: a linked file keeps its mixed precision",
    "O0 takes the mixed precision of one training step out of all the files it spans, or of "
    "none: the file named in the message cannot lose its own without breaking (its AMP425 "
    "finding says why), so this one keeps its mixed precision too.",
    why="`--opt-level O0` on a project where another file of the same training step keeps its "
        "mixed precision (AMP425).",
    example=(
        "$ amprewrite --opt-level O0 .   # main.py passes its scaler to engine.train()\n"
        "# engine.py:1:1: AMP428 not reverted: main.py, which shares this file's training "
        "step, keeps its mixed precision (AMP425)"
    ),
)

# Recipes that leave room for a project's links; any other (a migration, existing AMP, a
# framework) rewrites its module alone.
_LINKABLE = frozenset({"mixed-precision", "nothing-to-rewrite"})


def links_projects(options: Options) -> bool:
    """Whether a project's modules are rewritten together: not when no scaler is needed at
    all (bfloat16 with --plain). O0 reverts them together, as they were rewritten."""
    return options.opt_level == "O0" or not (options.plain and options.dtype == "bfloat16")


def rewrite_project(
    named: dict[Path, str], options: Options, write: bool, jobs: int | None = None
) -> tuple[list[FileOutcome], set[Path]]:
    """Outcomes of the named files that belong to a group of linked modules, and those
    files; the others are left to the single-file path. `jobs`: processes for outlining
    many files (default: all cores)."""
    recovered = journal.recover(project_root(list(named))) if write else []
    outcomes = [FileOutcome(shown_path(record), Status.UNCHANGED, [journal.completed(
        [shown_path(file) for file in files])]) for record, files in recovered]
    program = load_program(named, jobs)
    handled: set[Path] = set()
    for group in program.groups:
        members = [path for path in group if path in named]
        try:
            with time_budget(files=len(group)):
                group_outcomes = _rewrite_group(program, group, set(named), options)
        except OverBudget:
            group_outcomes = _all_left(program, members, Status.UNCHANGED,
                                       over_time(files=len(group)))
        except Exception as exc:  # a bug, or a module too deep to link: this group only
            group_outcomes = _all_left(program, members, Status.FAILED, rewrite_failure(exc))
        if group_outcomes is None:
            continue
        if write:  # outside the budget: a write is never abandoned half way
            by_shown = {program.shown[path]: path for path in members}
            _write_all(group_outcomes, [by_shown[outcome.path] for outcome in group_outcomes],
                       program.root)
        outcomes.extend(group_outcomes)
        handled.update(members)
    return outcomes, handled


def _rewrite_group(
    program: Program, group: list[Path], named: set[Path], options: Options
) -> list[FileOutcome] | None:
    """The named files' outcomes, or None when the group turns out not to be linked (the
    single-file path then takes them)."""
    modules = _analysed(program, group)
    if isinstance(modules, tuple):  # a module that cannot be parsed
        return _blocked_by(program, group, named, *modules)
    if options.opt_level == "O0":
        return _revert_group(program, modules, named, options)
    if any(choose(m.analysis, options).name not in _LINKABLE for m in modules):
        return None
    link_group(modules, program)
    linked = [m for m in modules if m.links]
    if not linked:
        return None
    unnamed = [m.shown for m in linked if m.path not in named]
    if unnamed:
        return [_needs_unnamed(program, m, unnamed) for m in modules if m.path in named]
    for module in modules:
        module.analysis.links = module.links if module.links else None
    return _carry_out(program, group, modules, named, options)


def _analysed(program: Program, group: list[Path]) -> list[LinkedModule] | tuple[Path, Finding]:
    """The group's modules parsed and analysed, or the first that cannot be and why."""
    modules = []
    for path in group:
        try:
            source = program.sources[path]
            analysis = ModuleAnalysis(engine.parse(source),
                                      project_kinds=program.kinds_for(path), source=source)
        except Exception as exc:
            return path, rewrite_failure(exc)
        modules.append(LinkedModule(path, program.shown[path], analysis))
    return modules


def _revert_group(
    program: Program, modules: list[LinkedModule], named: set[Path], options: Options
) -> list[FileOutcome] | None:
    """O0 on a rewritten project: the named files revert together, and not while a module
    that was not named still uses the scaler a named one would stop taking or creating."""
    reverting = [m for m in modules if m.path in named and m.analysis.amp_usage]
    if not reverting:
        return None
    unnamed = [m.shown for m in modules if m.path not in named and m.analysis.amp_usage]
    if unnamed:
        return [_needs_unnamed(program, m, unnamed) for m in modules if m.path in named]
    outcomes = _carry_out(program, [m.path for m in modules], modules, named, options)
    kept = next((outcome.path for outcome in outcomes if any(
        f.code == REVERT_WOULD_BREAK for f in outcome.findings)), None)
    if kept is None:
        return outcomes
    return [outcome if outcome.path == kept or outcome.status is not Status.CHANGED else
            FileOutcome(outcome.path, Status.UNCHANGED, [Finding(
                LINKED_REVERT_REFUSED, 1, 1, f"not reverted: {kept}, which shares this file's "
                f"training step, keeps its mixed precision ({REVERT_WOULD_BREAK})")],
                outcome.before, outcome.before)
            for outcome in outcomes]


def _carry_out(
    program: Program, group: list[Path], modules: list[LinkedModule], named: set[Path],
    options: Options,
) -> list[FileOutcome]:
    """Every named module of the group rewritten and compiled (written after, together)."""
    results: dict[Path, FileOutcome] = {}
    withheld: dict[Path, str] = {}  # why a file's edits were withheld (`steering`)
    for module in modules:
        if module.path not in named:
            continue
        source = program.sources[module.path]
        chosen = options_for(options, str(module.path))
        try:
            result = engine.accounted(
                source, engine.rewrite_analysed(module.analysis, source, chosen), chosen)
        except Exception as exc:
            return _blocked_by(program, group, named, module.path, rewrite_failure(exc))
        if result.withheld is not None:
            withheld[module.path] = result.withheld
        changed = result.changed and result.source != source
        results[module.path] = FileOutcome(
            module.shown, Status.CHANGED if changed else Status.UNCHANGED,
            list(result.findings), source, result.source if changed else source)
    rejected = [path for path, outcome in results.items()
                if any(f.code in REJECTIONS for f in outcome.findings)]
    if rejected:
        return _all_unchanged(program, results, rejected[0])
    if withheld and len(results) > 1:
        return _all_withheld(program, results, withheld)
    return list(results.values())


def _all_unchanged(
    program: Program, results: dict[Path, FileOutcome], rejected: Path
) -> list[FileOutcome]:
    """A linked group whose rewrite was rejected in one file: every file left as it was, the
    rejected one with its findings but those of its changes, the others naming it."""
    outcomes = []
    for outcome in results.values():
        if any(f.code in REJECTIONS for f in outcome.findings):
            findings = [f for f in outcome.findings if f.severity is not CHANGE]
        else:
            findings = [Finding(LINKED_FILE_REJECTED, 1, 1, "not rewritten: the rewrite of "
                                f"{program.shown[rejected]}, which shares this file's training "
                                "step, was rejected by the protocol check")]
        outcomes.append(FileOutcome(outcome.path, Status.UNCHANGED, findings, outcome.before,
                                    outcome.before))
    return outcomes


def _all_withheld(
    program: Program, results: dict[Path, FileOutcome], withheld: dict[Path, str]
) -> list[FileOutcome]:
    """A linked group with edits withheld in some file (its code ignored there): every file
    left as it was, since no file's check sees the others' half of the training step."""
    first, reason = next(iter(withheld.items()))
    outcomes = []
    for path, outcome in results.items():
        kept = [f for f in outcome.findings if f.severity is not CHANGE]
        why = (f"edits withheld: once {withheld[path]}, the linked files sharing this "
               "training step cannot be rewritten without it; left unchanged"
               if path in withheld else
               f"edits withheld: once {reason} in {program.shown[first]}, which shares this "
               "file's training step, it is not rewritten either; left unchanged")
        outcomes.append(FileOutcome(outcome.path, Status.UNCHANGED,
                                    [*kept, Finding(WITHHELD, 1, 1, why)], outcome.before,
                                    outcome.before))
    return outcomes


def _all_left(
    program: Program, paths: list[Path], status: Status, finding: Finding
) -> list[FileOutcome]:
    """Each of `paths` left as it is, with `status` and `finding`."""
    return [FileOutcome(program.shown[path], status, [finding], program.sources[path],
                        program.sources[path]) for path in paths]


def _needs_unnamed(program: Program, module: LinkedModule, unnamed: list[str]) -> FileOutcome:
    source = program.sources[module.path]
    others = ", ".join(unnamed)
    finding = Finding(NEEDS_UNNAMED_FILE, 1, 1, f"the training step continues in {others}, "
                      f"which was not named: nothing changed; run amprewrite on "
                      f"{module.shown} and {others} together (or on the directory)")
    return FileOutcome(module.shown, Status.FAILED, [finding], source, source)


def _blocked_by(
    program: Program, group: list[Path], named: set[Path], failed: Path, finding: Finding
) -> list[FileOutcome]:
    """The failing file's outcome (when named) with its `finding`, and every other named
    file left as it is, with a finding naming the failing one."""
    outcomes = []
    for path in group:
        if path not in named:
            continue
        source = program.sources[path]
        if path == failed:
            outcomes.append(FileOutcome(program.shown[path], Status.FAILED, [finding], source,
                                        source))
            continue
        outcomes.append(FileOutcome(program.shown[path], Status.UNCHANGED, [Finding(
            LINKED_FILE_FAILED, 1, 1, f"not rewritten: {program.shown[failed]}, which shares "
            f"this file's training step, cannot be rewritten ({finding.code})")], source, source))
    return outcomes


def _write_all(outcomes: list[FileOutcome], paths: list[Path], root: Path) -> None:
    """Write every changed file, or none: each is staged (written and fsynced beside its
    target) before any is renamed into place, and when one cannot be staged or renamed,
    those already renamed are put back and all are marked failed. Ctrl-C meanwhile takes
    effect once they are all written (or put back); anything else that interrupts the writes
    (SystemExit, a Ctrl-C outside the main thread) puts back those already renamed before it
    goes on. SIGKILL (or a power cut) between two renames leaves the group's journal in
    `root`, from which the next run completes it."""
    changed = [(path, outcome) for path, outcome in zip(paths, outcomes, strict=True)
               if outcome.status is Status.CHANGED]
    with _ctrl_c_deferred():
        staged: list[Staged] = []
        for path, outcome in changed:
            try:
                staged.append(stage(path, outcome.after))
            except BaseException as exc:
                _abandon(outcomes, outcome, exc, [], staged)
                return
        entries = [journal.Entry(str(new.target), new.temporary, journal.digest(
            outcome.before), journal.digest(outcome.after))
            for (_, outcome), new in zip(changed, staged, strict=True)]
        record = journal.begin(root, entries) if len(changed) > 1 else None
        try:
            for index, ((_, outcome), new) in enumerate(zip(changed, staged, strict=True)):
                try:
                    new.commit(expected=outcome.before)
                except BaseException as exc:
                    _abandon(outcomes, outcome, exc, changed[:index], staged[index + 1:])
                    return
        finally:
            if record is not None:
                journal.end(record)


def _abandon(
    outcomes: list[FileOutcome], failed: FileOutcome, exc: BaseException,
    written: list[tuple[Path, FileOutcome]], staged: list[Staged],
) -> None:
    """Undo a group's writes after `failed`'s raised `exc` (raised again unless an
    Exception): those `written` put back, those `staged` discarded, every changed outcome
    marked failed."""
    for new in staged:
        new.discard()
    _put_back(written)
    if not isinstance(exc, Exception):
        raise exc
    failure = write_failure(exc)
    for other in outcomes:
        if other.status is Status.CHANGED:
            other.status = Status.FAILED
            other.after = other.before
            other.findings.append(failure if other is failed else Finding(
                LINKED_FILE_FAILED, 1, 1, f"not written: {failed.path}, which shares "
                "this file's training step, could not be written"))


@contextlib.contextmanager
def _ctrl_c_deferred() -> Iterator[None]:
    """SIGINT received inside the block raises KeyboardInterrupt when it ends (in the main
    thread, where Python handles signals; where SIGINT is ignored it stays ignored)."""
    handler = signal.getsignal(signal.SIGINT)
    if handler in (signal.SIG_IGN, None) or threading.current_thread() is not (
            threading.main_thread()):
        yield
        return
    received: list[int] = []
    signal.signal(signal.SIGINT, lambda number, frame: received.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, handler)
    if received:
        raise KeyboardInterrupt


def _put_back(written: list[tuple[Path, FileOutcome]]) -> None:
    """Restore the files of a group already written; one that cannot be restored says so."""
    for path, outcome in written:
        try:
            write_atomically(path, outcome.before, expected=outcome.after)
        except Exception as exc:
            outcome.findings.append(Finding(LINKED_FILE_FAILED, 1, 1, "written, and could not "
                                            f"be put back ({write_failure(exc).message}): "
                                            "restore it from version control"))
