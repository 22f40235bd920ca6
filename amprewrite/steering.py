"""Findings that steer the change, as an ignored rule's fix is not applied in ruff: an edit
whose finding the user's selection leaves out (`--select`/`--ignore`, `per-file-ignores`, a
`# amprewrite: ignore[...]` or `# noqa: AMP...` comment at the finding's line) is withheld.

Each rule's edits go with the findings (notes) it planned beside them: an edit goes with the
notes on the statements holding it, or holding the edit, else with those of its function,
else with all of its rule's. An edit is withheld when any note it goes with is left out; the
edits no note goes with (the imports and definitions a recipe adds last) are withheld when
every other edit is, and the autocast regions of a function whose other edits are withheld
(they were planned with what those edits make safe). What else depends on a withheld edit is
not decided here: the protocol check (`verification`) rejects a plan whose remainder breaks
the protocol (a routed step without its scaled backward), so dependent edits are undone
there, with a finding saying why."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts, Statement, body
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, LINT, SKIP, declare
from amprewrite.codegen import Layout, render
from amprewrite.findings import Finding
from amprewrite.options import Options
from amprewrite.rules.context import RuleContext
from amprewrite.suppressions import LineCodes, line_codes, suppressed, wanted
from amprewrite.transform import Edit, InsertAfterSmall, Plan, Replace, Wrap

WITHHELD = declare(
    "AMP012", SKIP, "edits withheld: they depend on an edit whose code is ignored",
    "Nothing to do if this is what you meant: the function (or file) keeps its FP32 form. To "
    "have it rewritten, stop ignoring the code this finding names (`--ignore`, "
    "`per-file-ignores`, or the `# amprewrite: ignore[...]` / `# noqa: AMP...` comment at its "
    "line).",
    why="An ignored code's edit is not made, and the rest of the plan would break the AMP "
        "protocol without it (a routed `scaler.step` without its scaled backward, clipping "
        "of gradients never unscaled, a scaler nothing uses), so the protocol check undid the "
        "edits that depend on it.",
    example="""\
# amprewrite --ignore AMP102 train.py
loss.backward()   # AMP102 ignored: not scaled, so `optimizer.step()` is not routed either
optimizer.step()  # AMP012: edits withheld: they depend on AMP102 (ignored) at line 1
""",
)

_STEERING = (CHANGE, LINT)  # the notes whose codes carry edits: a change, a lint's fix


@dataclass
class _Group:
    """What one rule planned: its edits and the notes beside them."""

    edits: list[Edit]
    notes: list[Note]


@dataclass
class Steering:
    """The user's selection for one file, and each rule's part of its plan."""

    options: Options
    comments: LineCodes
    groups: list[_Group] = field(default_factory=list)

    @contextmanager
    def rule(self, ctx: RuleContext) -> Iterator[None]:
        """Record what the rule run in the block adds to `ctx`'s plan and notes."""
        edits, notes = {id(e) for e in ctx.plan.edits()}, {id(n) for n in ctx.notes}
        yield
        self.groups.append(_Group([e for e in ctx.plan.edits() if id(e) not in edits],
                                  [n for n in ctx.notes if id(n) not in notes]))


def steering(
    options: Options, source: bytes, comments: LineCodes | None = None
) -> Steering | None:
    """The selection to apply to `source`'s plan (`comments`: its suppressions by line, where
    they are not its own); None where it withholds nothing."""
    comments = line_codes(source) if comments is None else comments
    if not (options.select or options.ignore or comments):
        return None
    return Steering(options, comments)


@dataclass(frozen=True)
class Withheld:
    """What steering took out of a plan: the findings of the withheld edits (those whose codes
    are left out the report does not show, but the ledger counts their sites as accounted
    for), the notes they replace, and why, for the findings of what then depends on them."""

    findings: list[Finding]
    notes: frozenset[int]  # id() of each note replaced by a finding of `findings`
    reason: str  # "AMP102 is ignored at `loss.backward()`"


def steer(ctx: RuleContext, chosen: Steering, layout: Layout) -> Withheld | None:
    """Take the edits the selection leaves out of `ctx.plan` (`layout` locates every note);
    None where it takes none."""
    left_out = {id(note) for group in chosen.groups for note in group.notes
                if note.code.severity in _STEERING and not _kept(note, chosen, layout)}
    if not left_out:
        return None
    edits_of: dict[int, list[int]] = {}  # note -> the edits going with it
    withheld: set[int] = set()
    for group in chosen.groups:
        for edit in group.edits:
            notes = _notes_of(edit, group, ctx.facts)
            for note in notes:
                edits_of.setdefault(id(note), []).append(id(edit))
            if any(id(note) in left_out for note in notes):
                withheld.add(id(edit))
    _withhold_regions(chosen.groups, withheld, ctx.facts)
    noted = {edit for edits in edits_of.values() for edit in edits}
    ctx.plan = Plan() if withheld >= noted else Plan.of(
        edit for edit in ctx.plan.edits() if id(edit) not in withheld)
    notes = [note for group in chosen.groups for note in group.notes]
    ignored = sorted((note for note in notes if id(note) in left_out),
                     key=lambda note: (layout.starts[note.node], note.code))
    reason = f"{ignored[0].code} is ignored at `{_shown(ignored[0].node, ctx.facts.module)}`"
    findings = [Finding(f.code, f.line, f.col, f"{f.message} (not made: {f.code} is ignored "
                        "here)") for f in (_located(note, layout) for note in ignored)]
    stale = [note for note in notes if id(note) not in left_out and id(note) in edits_of
             and set(edits_of[id(note)]) <= withheld]  # every edit of its change withheld
    for found in (_located(note, layout) for note in stale):
        findings.append(Finding(found.code, found.line, found.col,
                                f"{found.message} (not made: it goes with {reason})"))
    return Withheld(findings, frozenset({*left_out, *map(id, stale)}), reason)


def _withhold_regions(groups: list[_Group], withheld: set[int], facts: ModuleFacts) -> None:
    """Add to `withheld` the regions (`with autocast():` wraps) of each function holding a
    withheld edit of another kind: its regions were planned with what that edit made safe
    (a value cast back to float32 before NumPy or a float32 loss, a sampler kept out), so
    without it they are not made either and the function's math stays float32."""
    edits = [edit for group in groups for edit in group.edits]
    functions = {id(_function(statement, facts)) for edit in edits
                 if id(edit) in withheld and not isinstance(edit, Wrap)
                 for statement in _statements(edit, facts)}

    def in_them(edit: Edit) -> bool:
        return any(id(_function(s, facts)) in functions for s in _statements(edit, facts))

    for group in groups:  # a region goes with what its rule planned beside it there
        if any(isinstance(edit, Wrap) and in_them(edit) for edit in group.edits):
            withheld.update(id(edit) for edit in group.edits if in_them(edit))


def _kept(note: Note, chosen: Steering, layout: Layout) -> bool:
    options = chosen.options
    line = layout.starts[note.node][0]
    return wanted(note.code, options.select, options.ignore) and not suppressed(
        chosen.comments, line, note.code)


def _shown(node: cst.CSTNode, module: cst.Module) -> str:
    """The node's code, its first line, shortened."""
    text = render(node, module).strip().splitlines()[0]
    return text if len(text) <= 40 else f"{text[:37]}..."


def _located(note: Note, layout: Layout) -> Finding:
    line, column = layout.starts[note.node]
    return Finding(note.code, line, column + 1, note.message)


def _notes_of(edit: Edit, group: _Group, facts: ModuleFacts) -> list[Note]:
    """The notes of `group` that `edit` goes with."""
    steering_notes = [note for note in group.notes if note.code.severity in _STEERING]
    if not steering_notes:
        return []
    held = _statements(edit, facts)
    chains = {id(note): facts.statements_around(note.node) for note in steering_notes}
    close = [note for note in steering_notes if any(
        _holds(chains[id(note)], statement, facts) for statement in held)]
    if close:
        return close
    scope = _function(held[0], facts) if held else None
    same = [note for note in steering_notes if chains[id(note)] and _function(
        chains[id(note)][0], facts) is scope]
    return same or steering_notes


def _holds(chain: list[Statement], statement: Statement, facts: ModuleFacts) -> bool:
    """Whether the note's statements (`chain`, innermost first) and `statement` nest."""
    return bool(chain) and (statement in chain or chain[0] in facts.statements_around(statement))


def _statements(edit: Edit, facts: ModuleFacts) -> list[Statement]:
    """The statements `edit` changes, or beside which it adds its own."""
    if isinstance(edit, Replace):
        return facts.statements_around(edit.node)[:1]
    if isinstance(edit, InsertAfterSmall):
        return facts.statements_around(edit.small)[:1]
    statements = body(edit.block)
    if isinstance(edit, Wrap):
        wrapped = list(statements[edit.start : edit.end + 1])
        return wrapped or list(statements[edit.start : edit.start + 1])
    near = statements[max(edit.index - 1, 0) : edit.index + 1]
    return list(near[:1]) if edit.index > 0 else list(near)


def _function(statement: Statement, facts: ModuleFacts) -> cst.CSTNode | None:
    """The function holding `statement` (None: the module level)."""
    for around in facts.statements_around(statement)[1:]:
        if isinstance(around, cst.FunctionDef):
            return around
    return None
