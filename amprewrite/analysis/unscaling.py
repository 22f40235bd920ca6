"""Code between a backward and its optimizer step that needs true (unscaled) gradients."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import libcst as cst

from amprewrite.analysis.facts import CallSite, ModuleFacts, Statement
from amprewrite.analysis.names import dotted, iter_keys, walk
from amprewrite.analysis.opaque_calls import GradientReach
from amprewrite.analysis.sites import StepSite, guards_of
from amprewrite.analysis.summaries import Summaries

_CLIP_FUNCTIONS = frozenset({"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm"})


@dataclass(frozen=True)
class Unscale:
    """Gradients of `optimizer` must be unscaled before `statement` (it clips or reads them)."""

    statement: Statement
    optimizer: cst.BaseExpression
    reason: str
    iterate: str | None = None  # `optimizers`: the optimizer is a loop's element; unscale each
    function: cst.FunctionDef | None = None  # where `statement` is: the step's, or on its way


@dataclass(frozen=True)
class Clip:
    """A gradient-clipping call that acts on what `optimizer` steps."""

    site: CallSite
    optimizer: cst.BaseExpression


@dataclass(frozen=True)
class Elsewhere:
    """A use of `step`'s gradients in another function, where `unscale_` cannot go."""

    statement: Statement
    step: StepSite
    reason: str  # what the statement does: "gradient clipping"
    problem: str  # why no `unscale_` can precede it there


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
    # uses in another function than the step's where no `unscale_` can go
    elsewhere: list[Elsewhere] = field(default_factory=list)
    # every statement on a step's way that reads `.grad` (itself or through a function of the
    # file): at O2 the model's gradients have moved to the master weights there
    reads: list[tuple[Statement, StepSite]] = field(default_factory=list)


def gradient_uses(
    steps: list[StepSite],
    backwards: Sequence[CallSite],
    facts: ModuleFacts,
    reach: GradientReach | None = None,
    summaries: Summaries | None = None,
) -> GradientUses:
    """For each step, the clips and `.grad` reads between its last backward and itself (with
    `reach`, also the calls the analysis cannot see into that may reach the parameters, where
    they run once per step); the first of them is where `unscale_` goes. With `summaries`,
    the backward or the step may run in a local function called on the way (`loss =
    self.forward_backward(x)`, `self.optimizer_step()`): the code between them is then read in
    each function it runs in. One pass over each step's lines also finds the uses no
    `unscale_` can serve."""
    uses = GradientUses()
    readers = _grad_readers(facts)
    stepped = {name for s in steps if (name := dotted(s.optimizer)) is not None}
    for step in steps:
        others = stepped - {dotted(step.optimizer)}
        placed = False  # one `unscale_` per step, before the first use on its way
        for window in _path(step, backwards, facts, summaries, 0):
            clipped = len(uses.clips)
            found = _uses_in(window, step, others, readers, reach, facts, uses)
            if not found:
                continue
            _, first, reason = min(found, key=lambda item: item[0])
            unnamed = _out_of_reach(step, window.anchor.function, facts)
            if placed:  # past the `unscale_`; O2 clips the master weights, named by the optimizer
                if unnamed is not None and len(uses.clips) > clipped:
                    uses.elsewhere.append(Elsewhere(uses.clips[clipped].site.statement, step,
                                                    "gradient clipping", unnamed))
                continue
            placed = True
            statement = _dominating(first, [s for _, s, _ in found], facts)
            statement = _outside_loops(statement, window.anchor.statement, facts)
            problem = window.problem or unnamed or _per_micro_batch(statement, window, facts)
            if problem is None:
                uses.unscales.append(Unscale(statement, step.optimizer, reason,
                                             function=window.anchor.function))
            else:
                uses.elsewhere.append(Elsewhere(first, step, reason, problem))
    return uses


@dataclass(frozen=True)
class _Window:
    """The statements of one function that run between a backward and a step: source
    positions `start` < p < `end` in `anchor.function`. `anchor` is the step, or, in another
    function, the call leading to it or the backward it follows."""

    anchor: StepSite
    # the statement at `start`: a backward, a call running one, or the function itself when
    # the backward ran before it was called
    backward: Statement
    start: int
    end: int
    problem: str | None = None  # why no `unscale_` can go here
    tail: bool = False  # after the backward in a helper, which the step does not follow in


_DEPTH = 3  # local calls followed from a step to its backward


def _path(
    anchor: StepSite, backwards: Sequence[CallSite], facts: ModuleFacts,
    summaries: Summaries | None, depth: int,
) -> list[_Window]:
    """The windows from the last backward before `anchor` to it, in the order they run."""
    end = facts.order[anchor.statement]
    point = _backward_point(anchor.function, end, backwards, facts, summaries)
    if point is not None:
        start, backward, call = point
        window = _Window(anchor, backward, start, end)
        if call is None or summaries is None or depth >= _DEPTH:
            return [window]
        return [*_tail(call, anchor, backwards, facts, summaries, depth + 1), window]
    function = anchor.function
    if summaries is None or function is None or depth >= _DEPTH:
        return []
    callers = [site for site, callee in summaries.local_calls
               if callee is function and site.function is not function]
    windows = []
    for site in callers:
        outer = replace(anchor, call=site.call, statement=site.statement, small=site.small,
                        function=site.function, guards=guards_of(site.statement, facts))
        problem = None if len(callers) == 1 else (
            f"`{function.name.value}`, which steps the optimizer, is called from "
            f"{len(callers)} places")
        windows += [replace(w, problem=w.problem or problem)
                    for w in _path(outer, backwards, facts, summaries, depth + 1)]
    return [*windows, _Window(anchor, function, facts.order[function], end)] if windows else []


def _tail(
    call: CallSite, anchor: StepSite, backwards: Sequence[CallSite], facts: ModuleFacts,
    summaries: Summaries, depth: int,
) -> list[_Window]:
    """The windows after the backward inside the local function `call` runs (`def
    forward_backward(self, x): ...; loss.backward(); clip_grad_norm_(...)`), innermost first."""
    function = summaries.callee(call.call, call.function)
    if function is None:
        return []
    point = _backward_point(function, len(facts.order), backwards, facts, summaries)
    if point is None:
        return []
    start, backward, inner = point
    here = replace(anchor, call=call.call, statement=backward, small=None, function=function,
                   guards=())
    problem = _once_per_step(function, call, anchor, facts, summaries)
    window = _Window(here, backward, start, len(facts.order), problem, tail=True)
    if inner is None or depth >= _DEPTH:
        return [window]
    deeper = _tail(inner, here, backwards, facts, summaries, depth + 1)
    return [*(replace(w, problem=w.problem or problem) for w in deeper), window]


def _backward_point(
    function: cst.FunctionDef | None, end: int, backwards: Sequence[CallSite],
    facts: ModuleFacts, summaries: Summaries | None,
) -> tuple[int, Statement, CallSite | None] | None:
    """The last statement of `function` before source position `end` that runs a backward
    (its position, itself), and how: itself (None) or through a call of a local function."""
    points: list[tuple[int, bool, CallSite]] = [
        (facts.order[b.statement], True, b) for b in backwards
        if b.function is function and facts.order[b.statement] < end]
    if summaries is not None:
        points += [(facts.order[site.statement], False, site)
                   for site, callee in summaries.local_calls
                   if site.function is function and facts.order[site.statement] < end
                   and callee is not function and summaries.functions[callee].backward]
    if not points:
        return None
    position, itself, site = max(points, key=lambda point: point[:2])
    return position, site.statement, None if itself else site


def _once_per_step(
    function: cst.FunctionDef, call: CallSite, anchor: StepSite, facts: ModuleFacts,
    summaries: Summaries,
) -> str | None:
    """Why code after the backward in `function` may not run once per step of `anchor`:
    `function` is called elsewhere too, or `call` runs per micro-batch."""
    calls = [site for site, callee in summaries.local_calls if callee is function]
    if len(calls) > 1:
        return f"`{function.name.value}` is called from {len(calls)} places"
    if (not runs_with_step(call.statement, anchor, facts)
            or _outside_loops(call.statement, anchor.statement, facts) is not call.statement):
        return f"`{function.name.value}` may run more than once per optimizer step"
    return None


def _per_micro_batch(statement: Statement, window: _Window, facts: ModuleFacts) -> str | None:
    """Why an `unscale_` before `statement` would not run once per step, else None: a loop
    around it (or it) also runs the backward and is not around the step, so the gradients are
    used once per micro-batch (`for micro in batch: loss.backward(); clip_grad_norm_(...)`),
    and an `unscale_` there would run before the backward or again on the next micro-batch."""
    around_step = set() if window.tail else set(
        facts.enclosing_statements(window.anchor.statement))
    around_backward = set(facts.enclosing_statements(window.backward))
    for outer in facts.enclosing_statements(statement):
        if isinstance(outer, cst.FunctionDef | cst.ClassDef):
            break
        if (isinstance(outer, cst.For | cst.While) and outer in around_backward
                and outer not in around_step):
            return "they are used once per micro-batch, inside the loop that runs the backward"
    return None


def _out_of_reach(
    step: StepSite, function: cst.FunctionDef | None, facts: ModuleFacts
) -> str | None:
    """Why `step`'s optimizer cannot be named in `function`, else None: `self.optimizer` is
    the same in methods of one class, a module-level name the same where nothing rebinds it."""
    if function is step.function:
        return None
    text = facts.one_line(step.optimizer)
    where = "module level" if function is None else f"`{function.name.value}`"
    problem = f"`{text}` is not known to be the same optimizer in {where}"
    key = dotted(step.optimizer)
    if key is None:
        return problem
    root = key.split(".", 1)[0]
    if root == "self":
        owner = facts.function_class.get(step.function) if step.function else None
        same = owner is not None and function is not None and (
            facts.function_class.get(function) is owner)
        return None if same else problem
    local = [f for f in (step.function, function) if f is not None and (
        root in {name for names in facts.parameters(f) for name in names}
        or any(b.function is f and root in {k.split(".", 1)[0] for k in b.keys}
               for b in facts.bindings))]
    module_level = any(b.function is None and root in {k.split(".", 1)[0] for k in b.keys}
                       for b in facts.bindings)
    return None if module_level and not local else problem


def _uses_in(
    window: _Window, step: StepSite, others: set[str], readers: set[str],
    reach: GradientReach | None, facts: ModuleFacts, uses: GradientUses,
) -> list[tuple[int, Statement, str]]:
    """The clips, `.grad` reads and calls it cannot see into in `window` that need `step`'s
    gradients unscaled (recording clips and the uses no `unscale_` can serve in `uses`)."""
    anchor, optimizer, start, end = window.anchor, step.optimizer, window.start, window.end
    found: list[tuple[int, Statement, str]] = []
    for site in facts.calls:
        position = facts.order[site.statement]
        if (site.function is anchor.function and start < position < end
                and _is_clip(site.call) and not _names_another(site.call, optimizer, others)):
            found.append((position, site.statement, "gradient clipping"))
            uses.clips.append(Clip(site, optimizer))
    between = _statements_between(anchor, start, end, facts)
    for line, position in between:
        if type(line) is not cst.SimpleStatementLine:
            continue
        reads = reads_grad(line)
        reader = reads or _calls_any(line, readers)
        call = reach.opaque_call(line) if reach is not None else None
        if exclusive_branches(line, anchor.statement, facts):
            if reader or call is not None:
                uses.manual.append(line)
            continue
        if _names_another(line, optimizer, others):
            continue  # about another optimizer's gradients
        once_per_step = runs_with_step(line, anchor, facts)
        if reader:
            found.append((position, line, "code that reads `.grad`"))
            uses.reads.append((line, step))
        elif call is not None and once_per_step:
            found.append((position, line, f"`{_call_text(call, facts)}` (code "
                          "amprewrite cannot see into)"))
        if (call is not None and not once_per_step and not reads
                and all(call is not seen for seen, _ in uses.unguarded)):
            uses.unguarded.append((call, step))
    for compound, position in between:
        header = _header(compound)
        if (header is not None and (reads_grad(header) or _calls_any(header, readers))
                and not exclusive_branches(compound, anchor.statement, facts)
                and not _names_another(header, optimizer, others)):
            found.append((position, compound, "code that reads `.grad`"))
            uses.reads.append((compound, step))
    return found


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
