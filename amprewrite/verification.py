"""The verify step: every rewrite is checked, independently of the planner, before it is
returned (the protocol on every path, names bound, nothing changed outside the edits). A plan
the check rejects is undone where it broke (the edits of each function holding a broken
site), then checked again; where that cannot give a clean result, the whole file is left
unchanged. Each rejection is a finding at the input's line."""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, Code
from amprewrite.codegen import Layout, render
from amprewrite.findings import Finding
from amprewrite.leftovers import same_program, unused_added_imports, without_imports
from amprewrite.line_map import line_map
from amprewrite.protocol.check import violations
from amprewrite.protocol.invariants import CODE_CHANGED_ELSEWHERE, NAME_UNBOUND, Violation
from amprewrite.protocol.names import new_unbound_names, unbound_names
from amprewrite.protocol.unchanged import Edited, TopLevel, changed_outside, rendered
from amprewrite.steering import WITHHELD
from amprewrite.transform import Edit, InsertAfterSmall, Plan, Replace

MAX_ROUNDS = 3  # undo rounds before the whole file is left as it was
_NEW_SCALERS = re.compile(rb"GradScaler\(")
_SCALES = re.compile(rb"\.scale\(")


@dataclass(frozen=True)
class EditSite:
    """Where one edit of a plan lands in the input: the statement it changes (None: it only
    adds statements), whether it may change that statement wholly, and the function
    holding it (`Trainer.step`; "" at module level)."""

    edit: Edit
    statement: cst.CSTNode | None
    whole: bool
    scope: str


def edit_sites(plan: Plan, facts: ModuleFacts) -> list[EditSite]:
    sites = []
    for edit in plan.edits():
        if isinstance(edit, Replace):
            node: cst.CSTNode = edit.node
            chain: Sequence[cst.CSTNode] = facts.statements_around(node)
            if isinstance(node, cst.IndentedBlock | cst.Module) or not chain:
                chain = chain[1:]
                sites.append(EditSite(edit, chain[0] if chain else None, True, _scope(chain)))
            else:
                sites.append(EditSite(edit, chain[0], node is chain[0], _scope(chain)))
        elif isinstance(edit, InsertAfterSmall):
            sites.append(EditSite(edit, None, False, _scope(facts.statements_around(edit.small))))
        else:
            block = edit.block
            around = [] if isinstance(block, cst.Module) else facts.statements_around(block)[1:]
            sites.append(EditSite(edit, None, False, _scope(around)))
    return sites


def _scope(chain: Sequence[cst.CSTNode]) -> str:
    """The qualified name of the innermost function in `chain` (innermost first), as the
    protocol checker names scopes."""
    names = [node.name.value for node in chain if isinstance(node, cst.FunctionDef | cst.ClassDef)]
    kinds = [node for node in chain if isinstance(node, cst.FunctionDef | cst.ClassDef)]
    while kinds and not isinstance(kinds[0], cst.FunctionDef):
        kinds, names = kinds[1:], names[1:]
    return ".".join(reversed(names))


def statements_to_locate(sites: list[EditSite]) -> list[cst.CSTNode]:
    return [site.statement for site in sites if site.statement is not None]


@dataclass
class Verified:
    """A checked rewrite: its source, the plan carried out, the notes that still hold, and
    the findings of what was rejected (input lines)."""

    source: bytes
    plan: Plan
    notes: list[Note]
    rejections: list[Finding]


@dataclass(frozen=True)
class _Problem:
    code: Code
    line: int  # in the input
    col: int
    scope: str
    message: str


class _Input:
    """The input as the check reads it, each part computed once, when first needed."""

    def __init__(
        self, source: bytes, module: cst.Module, layout: Layout, tree: ast.Module | None
    ) -> None:
        self.source = source
        self.module = module
        self.text = source.decode(module.encoding)
        # libcst's positions are the text's (a file starting with a line continuation, which
        # libcst does not keep, is not compared outside the edits: its lines do not line up)
        self.lined_up = len(layout.spans) == len(module.body) and layout.length == len(
            self.text)
        self.top_level = TopLevel(self.text, layout.spans)
        self._tree = tree
        self._violations: Counter[tuple[str, str, object]] | None = None
        self._unbound: set[tuple[str, str]] | None = None

    @property
    def tree(self) -> ast.Module:
        if self._tree is None:
            self._tree = ast.parse(self.source)
        return self._tree

    def baseline(self) -> Counter[tuple[str, str, object]]:
        """The input's own violations, by (code, scope, site) and by (code, scope, line)."""
        if self._violations is None:
            self._violations = Counter()
            for found in violations(self.tree, self.text):
                self._violations[(found.code.id, found.scope, found.site)] += 1
                self._violations[(found.code.id, found.scope, found.line)] += 1
        return self._violations

    def unbound(self) -> set[tuple[str, str]]:
        if self._unbound is None:
            self._unbound = unbound_names(self.text)
        return self._unbound


def verify(
    source: bytes, module: cst.Module, ctx_plan: Plan, notes: list[Note], facts: ModuleFacts,
    sites: list[EditSite], layout: Layout,
    render: Callable[[Plan], tuple[bytes, ast.Module | None]], tree: ast.Module | None = None,
    withheld: str | None = None,
) -> Verified:
    """Render `ctx_plan` (`render` gives the text and, where it parsed it, its `ast` tree),
    check the result against `source` (parsed as `tree`, where the caller has it), and undo
    what breaks. `withheld`: why the plan lacks edits the user's selection left out
    (`steering`); what breaks is then reported as depending on them (AMP012)."""
    before = _Input(source, module, layout, tree)
    plan, kept = ctx_plan, sites
    rejections: list[Finding] = []
    undone: set[str] = set()
    pruned = False
    for _ in range(MAX_ROUNDS + 1):
        output, tree = render(plan)
        problems = _problems(before, output, tree, module.encoding, kept, layout)
        if not problems:
            if _scaler_left_unused(source, output, bool(undone) or withheld is not None):
                if withheld is not None and not rejections:
                    rejections.append(Finding(WITHHELD, 1, 1, (
                        f"the grad scaler the rewrite creates would scale nothing once "
                        f"{withheld}; file left unchanged")))
                break  # its creation and import serve the rest too: they cannot be separated
            if undone or withheld is not None:  # what is left may not need all it imports
                tree = tree if tree is not None else ast.parse(output)
                if same_program(tree, before.tree):
                    break
                unused = set() if pruned else unused_added_imports(tree, before.tree)
                if unused:
                    kept, pruned = without_imports(kept, unused), True
                    plan = Plan.of(site.edit for site in kept)
                    continue
            return Verified(output, plan, _holding(notes, facts, undone), rejections)
        rejections += [_rejection(p, withheld) for p in problems]
        undone |= {p.scope for p in problems}
        kept = [site for site in kept if site.scope not in undone]
        plan = Plan.of(site.edit for site in kept)
        if not plan:
            break
    return Verified(source, Plan(), _holding(notes, facts, None), _distinct(rejections))


def _rejection(problem: _Problem, withheld: str | None) -> Finding:
    if withheld is None:
        return Finding(problem.code, problem.line, problem.col + 1,
                       f"{problem.message}; {_left(problem.scope)}")
    return Finding(WITHHELD, problem.line, problem.col + 1,
                   f"edits withheld: once {withheld}, {problem.code} {problem.message}; "
                   f"{_left(problem.scope)}")


def _problems(
    before: _Input, output: bytes, tree: ast.Module | None, encoding: str,
    sites: list[EditSite], layout: Layout,
) -> list[_Problem]:
    text = output.decode(encoding)
    tree = tree if tree is not None else ast.parse(output)
    mapped: list[Callable[[int], int]] = []

    def to_input(line: int) -> int:
        if not mapped:
            mapped.append(line_map(output, before.source))
        return mapped[0](line)

    problems: list[_Problem] = []
    found = violations(tree, text)
    if found:
        baseline = Counter(before.baseline())
        for violation in found:
            line = to_input(violation.line)
            if not _in_baseline(baseline, violation, line):
                problems.append(_Problem(violation.code, line, violation.col, violation.scope,
                                         violation.message))
    texts = rendered(tree, text)
    unbound = new_unbound_names(before.top_level, texts, text, tree) if (
        before.lined_up) else None
    if unbound is None:
        unbound = unbound_names(text)
        unbound = unbound - before.unbound() if unbound else unbound
    if unbound:
        for scope, name in sorted(unbound):
            line = _first_use(text, name)
            problems.append(_Problem(NAME_UNBOUND, to_input(line), 0, scope.replace("/", "."),
                                     f"`{name}` is read here but nothing binds it"))
    changes = changed_outside(before.top_level, before.tree, tree, texts,
                              _edited(sites, layout, before)) if before.lined_up else []
    for change in changes:
        problems.append(_Problem(CODE_CHANGED_ELSEWHERE, change.line, 0, change.scope,
                                 "this statement differs in the rewrite, though no edit of the "
                                 "plan is on it"))
    return problems


def _in_baseline(baseline: Counter[tuple[str, str, object]], violation: Violation,
                 line: int) -> bool:
    for identity in ((violation.code.id, violation.scope, violation.site),
                     (violation.code.id, violation.scope, line)):
        if baseline[identity] > 0:
            baseline[identity] -= 1
            return True
    return False


def _first_use(text: str, name: str) -> int:
    match = re.search(rf"(?<![\w.]){re.escape(name)}\b", text)
    return 1 if match is None else text.count("\n", 0, match.start()) + 1


def _edited(sites: list[EditSite], layout: Layout, before: _Input) -> Edited:
    lines, spans = set(), []
    for site in sites:
        if site.statement is None:
            continue
        line = layout.starts[site.statement][0]
        lines.add(line)
        if site.whole:
            spans.append((line, line + _height(site.statement, before.module) - 1))
    return Edited(frozenset(lines), tuple(spans))


def _height(statement: cst.CSTNode, module: cst.Module) -> int:
    """How many lines a statement takes, its leading comments and blank lines left out."""
    leading = getattr(statement, "leading_lines", ())
    return max(1, render(statement, module).count("\n") - len(leading))


def _scaler_left_unused(source: bytes, output: bytes, partial: bool) -> bool:
    """After an undo (`partial`: edits were undone or withheld): a scaler the rewrite still
    creates, with none of its scaling kept."""
    if not partial:
        return False
    return (len(_NEW_SCALERS.findall(output)) > len(_NEW_SCALERS.findall(source))
            and len(_SCALES.findall(output)) <= len(_SCALES.findall(source)))


def _left(scope: str) -> str:
    where = f"`{scope}`" if scope else "the module level"
    return f"the rewrite of {where} is not written"


def _holding(notes: list[Note], facts: ModuleFacts, undone: set[str] | None) -> list[Note]:
    """The notes still true: a change's note goes with the change (None: every change)."""
    if undone is not None and not undone:
        return notes
    return [note for note in notes if note.code.severity is not CHANGE or (
        undone is not None and _scope(facts.statements_around(note.node)) not in undone)]


def _distinct(findings: list[Finding]) -> list[Finding]:
    return sorted(set(findings), key=lambda f: (f.line, f.col, f.code))
