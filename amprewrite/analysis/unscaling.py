"""Code between a backward and its optimizer step that needs true (unscaled) gradients."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis.facts import CallSite, ModuleFacts, Statement
from amprewrite.analysis.names import dotted, iter_keys, walk
from amprewrite.analysis.opaque_calls import GradientReach
from amprewrite.analysis.sites import StepSite

_CLIP_FUNCTIONS = frozenset({"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm"})


@dataclass(frozen=True)
class Unscale:
    """Gradients of `optimizer` must be unscaled before `statement` (it clips or reads them)."""

    statement: Statement
    optimizer: cst.BaseExpression
    reason: str
    iterate: str | None = None  # `optimizers`: the optimizer is a loop's element; unscale each


@dataclass(frozen=True)
class Clip:
    """A gradient-clipping call that acts on what `optimizer` steps."""

    site: CallSite
    optimizer: cst.BaseExpression


@dataclass
class GradientUses:
    """What runs between each backward and its step and may see its gradients."""

    unscales: list[Unscale] = field(default_factory=list)  # where `unscale_` goes, per step
    clips: list[Clip] = field(default_factory=list)
    # calls it cannot see into that may reach the parameters but do not run once per step
    # (outside an accumulation guard): no `unscale_` can precede them
    unguarded: list[tuple[cst.Call, StepSite]] = field(default_factory=list)
    # code that reads or may apply gradients in the other branch of the `if` holding a step
    # (`if optimizer is None: sgd(params, lr) else: optimizer.step()`): there the scaled
    # gradients are used as they are, and no `unscale_` can serve both branches
    manual: list[cst.SimpleStatementLine] = field(default_factory=list)


def gradient_uses(
    steps: list[StepSite],
    backwards: Sequence[CallSite],
    facts: ModuleFacts,
    reach: GradientReach | None = None,
) -> GradientUses:
    """For each step, the clips and `.grad` reads between its last backward and itself (with
    `reach`, also the calls the analysis cannot see into that may reach the parameters, where
    they run once per step); the first of them is where `unscale_` goes. One pass over each
    step's lines also finds the uses no `unscale_` can serve."""
    uses = GradientUses()
    readers = _grad_readers(facts)
    stepped = {name for s in steps if (name := dotted(s.optimizer)) is not None}
    for step in steps:
        optimizer = step.optimizer
        others = stepped - {dotted(optimizer)}
        window = _window(step, backwards, facts)
        if window is None:
            continue
        start, end = window
        found: list[tuple[int, Statement, str]] = []
        for site in facts.calls:
            position = facts.order[site.statement]
            if (site.function is step.function and start < position < end
                    and _is_clip(site.call) and not _names_another(site.call, optimizer, others)):
                found.append((position, site.statement, "gradient clipping"))
                uses.clips.append(Clip(site, optimizer))
        between = _statements_between(step, start, end, facts)
        for line, position in between:
            if type(line) is not cst.SimpleStatementLine:
                continue
            reads = reads_grad(line)
            reader = reads or _calls_any(line, readers)
            call = reach.opaque_call(line) if reach is not None else None
            if exclusive_branches(line, step.statement, facts):
                if reader or call is not None:
                    uses.manual.append(line)
                continue
            if _names_another(line, optimizer, others):
                continue  # about another optimizer's gradients
            once_per_step = runs_with_step(line, step, facts)
            if reader:
                found.append((position, line, "code that reads `.grad`"))
            elif call is not None and once_per_step:
                found.append((position, line, f"`{_call_text(call, facts)}` (code "
                              "amprewrite cannot see into)"))
            if (call is not None and not once_per_step and not reads
                    and all(call is not seen for seen, _ in uses.unguarded)):
                uses.unguarded.append((call, step))
        for compound, position in between:
            header = _header(compound)
            if (header is not None and (reads_grad(header) or _calls_any(header, readers))
                    and not exclusive_branches(compound, step.statement, facts)
                    and not _names_another(header, optimizer, others)):
                found.append((position, compound, "code that reads `.grad`"))
        if found:
            _, statement, reason = min(found, key=lambda item: item[0])
            statement = _dominating(statement, [s for _, s, _ in found], facts)
            statement = _outside_loops(statement, step.statement, facts)
            uses.unscales.append(Unscale(statement, optimizer, reason))
    return uses


def _window(
    step: StepSite, backwards: Sequence[CallSite], facts: ModuleFacts
) -> tuple[int, int] | None:
    """Source positions of the last backward before `step` in its function, and of `step`."""
    end = facts.order[step.statement]
    prior = [facts.order[b.statement] for b in backwards
             if b.function is step.function and facts.order[b.statement] < end]
    return (max(prior), end) if prior else None


def _statements_between(
    step: StepSite, start: int, end: int, facts: ModuleFacts
) -> list[tuple[Statement, int]]:
    """The statements of `step`'s function between source positions `start` and `end`."""
    return [(statement, position) for statement, position in facts.order.items()
            if start < position < end
            and (info := facts.statements.get(statement)) is not None
            and info.function is step.function]


def _header(statement: Statement) -> cst.CSTNode | None:
    """The test of an `if` or `while`, the iterable of a `for` (`if not all(torch.isfinite(
    p.grad).all() for p in params): continue`): code that runs before anything in its body,
    so an `unscale_` it needs goes before the whole statement."""
    if type(statement) is cst.If or type(statement) is cst.While:
        return statement.test
    if type(statement) is cst.For:
        return statement.iter
    return None


def runs_with_step(statement: Statement, step: StepSite, facts: ModuleFacts) -> bool:
    """Whenever `statement` runs, `step` follows in the same iteration: no guard of the step
    that is not also around `statement` (an accumulation guard). A loop around the step
    alone steps each optimizer of a container, each unscaled in a loop of its own."""
    around = facts.enclosing_statements(statement)
    tests = {facts.one_line(outer.test) for outer in around if isinstance(outer, cst.If)}
    return not exclusive_branches(statement, step.statement, facts) and not any(
        guard not in around
        and facts.one_line(guard.test) not in tests  # `if enc_opt is not None:` twice
        for guard in step.guards)


def exclusive_branches(statement: Statement, step: Statement, facts: ModuleFacts) -> bool:
    """`statement` and `step` sit in different branches of one `if` (`if optimizer is None:
    sgd(params) else: optimizer.step()`): no path runs both."""
    around, step_around = (facts.enclosing_statements(statement),
                           facts.enclosing_statements(step))
    return any(isinstance(outer, cst.If) and outer in step_around
               and _branch(outer, around, facts) != _branch(outer, step_around, facts)
               for outer in around[1:])


def _branch(node: cst.If, chain: list[Statement], facts: ModuleFacts) -> bool:
    """Whether the statement `chain` leads up from is in `node`'s body (else its `else`)."""
    child = chain[chain.index(node) - 1]
    return child is not node.orelse and facts.statements[child].block is node.body


def _call_text(call: cst.Call, facts: ModuleFacts) -> str:
    text = facts.one_line(call)
    return text if len(text) <= 60 else f"{facts.one_line(call.func)}(...)"


def _dominating(first: Statement, uses: list[Statement], facts: ModuleFacts) -> Statement:
    """The statement around `first` whose block also holds every other use: `unscale_` put
    before it runs whenever any of them does (not only inside `if clip:`)."""
    target = first
    while True:
        block = facts.statements[target].block
        if all(any(facts.statements.get(s) is not None and facts.statements[s].block is block
                   for s in facts.enclosing_statements(use)) for use in uses):
            return target
        parent = facts.statements[target].parent
        if parent is None or parent not in facts.statements:
            return target
        target = parent


def _outside_loops(target: Statement, step: Statement, facts: ModuleFacts) -> Statement:
    """The outermost loop around `target` that is not around `step` (`for p in
    model.parameters(): p.grad.data.clamp_(-1, 1)`), else `target`: unscale_ runs once per
    step, never once per parameter."""
    around_step = set(facts.enclosing_statements(step))
    for outer in facts.enclosing_statements(target)[1:]:
        if isinstance(outer, cst.FunctionDef | cst.ClassDef):
            break
        if isinstance(outer, cst.For | cst.While) and outer not in around_step:
            target = outer
    return target


def _names_another(node: cst.CSTNode, optimizer: cst.BaseExpression, others: set[str]) -> bool:
    """`clip_gradient(decoder_optimizer, 5.0)` is about another optimizer than `optimizer`:
    its gradients are not the ones this step's `unscale_` must precede."""
    keys = set(iter_keys(node))
    return bool(keys & others) and dotted(optimizer) not in keys


def _grad_readers(facts: ModuleFacts) -> set[str]:
    """How the module's functions that read or clip `.grad` (themselves or through the
    functions they call) are called: `clip_gradient` for a function, `self.clip` for a
    method. One walk per function, then the callers of readers until nothing changes."""
    names = {f: f.name.value if f not in facts.function_class else f"self.{f.name.value}"
             for f in facts.functions}
    readers: set[str] = set()
    callees: dict[cst.FunctionDef, set[str]] = {}
    for function, name in names.items():
        called: set[str] = set()
        for node in walk(function.body):
            if type(node) is cst.Call:
                if _is_clip(node):
                    readers.add(name)
                callee = dotted(node.func)
                if callee is not None:
                    called.add(callee)
            elif _is_grad_read(node):
                readers.add(name)
        callees[function] = called
    grown = True
    while grown:
        grown = False
        for function, name in names.items():
            if name not in readers and callees[function] & readers:
                readers.add(name)
                grown = True
    return readers


def _calls_any(node: cst.CSTNode, names: set[str]) -> bool:
    return any(type(n) is cst.Call and dotted(n.func) in names for n in walk(node))


def _is_clip(call: cst.Call) -> bool:
    func = call.func
    name = func.attr.value if type(func) is cst.Attribute else dotted(func)
    return name in _CLIP_FUNCTIONS


def reads_grad(node: cst.CSTNode) -> bool:
    """`x.grad` somewhere in `node` (`torch.autograd.grad(...)` is a function, not a read)."""
    return any(_is_grad_read(child) for child in walk(node))


def _is_grad_read(node: cst.CSTNode) -> bool:
    return (type(node) is cst.Attribute and node.attr.value == "grad"
            and not (dotted(node.value) or "").endswith("autograd"))
