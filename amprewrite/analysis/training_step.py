"""Facts about the training steps of a module: what to scale, step, update and autocast.

A training step is a backward pass whose gradients an optimizer steps. Backward and step
sites are paired module-wide (scripts spread them over functions); a module whose backward
passes feed no optimizer step here, or whose steps see no backward here, is left alone,
because scaling one side without the other would corrupt the gradients.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import libcst as cst

from amprewrite.analysis.definite_binding import (
    bound_on_every_path,
    bound_under_same_test,
    may_be_unbound,
)
from amprewrite.analysis.facts import Block, CallSite, ModuleFacts, Statement, body
from amprewrite.analysis.forward import computes, is_model_call
from amprewrite.analysis.kept_gradients import (
    GRADIENTS_KEPT_ACROSS_STEPS,
    keeps_gradients,
)
from amprewrite.analysis.kinds import (
    Kind,
    KindTable,
    optimizer_loop_elements,
)
from amprewrite.analysis.names import bound_keys, dotted, iter_keys, receiver_key
from amprewrite.analysis.opaque_calls import GradientReach
from amprewrite.analysis.scaler_protocol import (
    GRADIENTS_WITHOUT_OPTIMIZER,
    UpdatePoint,
    plan_updates,
)
from amprewrite.analysis.sites import (
    BackwardKind,
    BackwardSite,
    CallSites,
    StepSite,
    call_sites,
    guards_of,
)
from amprewrite.analysis.statements import (
    calls_in,
    is_compute,
    is_definition,
    is_zero_grad,
)
from amprewrite.analysis.summaries import summaries_of
from amprewrite.analysis.unscaling import (
    Clip,
    Unscale,
    gradient_uses,
    reads_grad,
)
from amprewrite.catalog import SKIP, Code, declare

CLOSURE_STEP = declare(
    "AMP103", SKIP, "optimizer step with a closure cannot be loss-scaled",
    "A grad scaler cannot drive `step(closure)` (LBFGS and friends); the step and its closure "
    "run in FP32. Move the work out of the closure to use AMP.",
    why=(
        "The optimizer is stepped with a closure (`optimizer.step(closure)`), which a "
        "grad scaler cannot drive."
    ),
)

BACKWARD_WITHOUT_STEP = declare(
    "AMP201", SKIP, "backward without an optimizer step",
    "Gradients computed for another purpose (saliency, inspection) are left unscaled; if this is "
    "a training step, make its optimizer step visible.",
    why=(
        "A `.backward()` whose gradients no optimizer step in this file consumes "
        "(saliency, inspection, or a step the analysis cannot see)."
    ),
    example=(
        "saliency = model(x)[0, label]\n"
        "saliency.backward()   # no optimizer step reads these gradients"
    ),
)

UNKNOWN_STEP_RECEIVER = declare(
    "AMP202", SKIP, "`.step()` receiver not recognised as an optimizer",
    "If it is an optimizer, build it with torch.optim (or pass it in from where it is built) so "
    "the step can be routed through the scaler.",
    why="`.step()` is called on something the analysis cannot tell is an optimizer.",
    example="trainer.step()   # not recognised as an optimizer",
)

LOSS_COMPUTED_ELSEWHERE = declare(
    "AMP203", SKIP, "loss computed outside the function that calls backward",
    "Wrap the forward pass and loss computation in `autocast()` where they run.",
    why=(
        "The loss that is backpropagated is computed in another function, which the "
        "rewrite cannot wrap from here."
    ),
    example=(
        "loss = compute_loss(batch)   # computed in another function\n"
        "loss.backward()"
    ),
)

BACKWARD_IN_CLOSURE = declare(
    "AMP204", SKIP, "backward inside an optimizer closure",
    "The closure's step cannot be scaled, so its backward stays unscaled.",
    why="`.backward()` runs inside an optimizer closure.",
)

STEP_WITHOUT_BACKWARD = declare(
    "AMP205", SKIP, "optimizer step without a backward pass in this file",
    "The step is left alone: no scaled loss reaches it from this file.",
    why="An optimizer is stepped in this file but no backward pass in it reaches the step.",
    example="optimizer.step()   # no backward in this file reaches it",
)

AUTOGRAD_BACKWARD = declare(
    "AMP206", SKIP, "`torch.autograd.backward` of unpacked tensors",
    "`torch.autograd.backward(*losses)` passes its tensors one by one, so no single "
    "`scaler.scale(...)` can wrap them: pass them as one sequence, "
    "`torch.autograd.backward(losses)`, and amprewrite scales it.",
    why=(
        "`torch.autograd.backward(...)` is given its tensors unpacked (`*losses`) or not at "
        "all, so they cannot be scaled as one argument."
    ),
    example=(
        "torch.autograd.backward(*losses)\n"
        "# write: torch.autograd.backward(losses)"
    ),
)

BACKWARD_WITH_ARGUMENT = declare(
    "AMP207", SKIP, "backward with a positional argument",
    "`x.backward(arg)` is a framework's backward (`accelerator.backward(loss)`) or passes a "
    "gradient; use the framework's own mixed-precision switch.",
    why=(
        "`.backward(...)` is called with a positional argument: a framework's backward "
        "or an explicit gradient."
    ),
    example=(
        "accelerator.backward(loss)\n"
        "out.backward(grad_out)"
    ),
)

OPTIMIZER_BOUND_ON_SOME_PATHS = declare(
    "AMP212", SKIP, "optimizer bound only on some paths",
    "The stepped optimizer is created inside a branch; the scaler calls would name it where it "
    "may not exist. Create it on every path, or use it only under the test that created it "
    "(`if args.autotune:` around its build and around its step, clipping and `.grad` reads).",
    why=(
        "The stepped optimizer is created inside a branch, so it may not exist on every "
        "path the scaler calls would name it."
    ),
    example=(
        "if args.sgd:\n"
        "    optimizer = torch.optim.SGD(params)\n"
        "...\n"
        "optimizer.step()   # `optimizer` may be unbound"
    ),
)

OPAQUE_CALL_ON_SCALED_GRADIENTS = declare(
    "AMP213", SKIP, "call that may read gradients runs on scaled ones",
    "A call amprewrite cannot see into (another module, a library, a callback) runs between "
    "backward and step, but not once per optimizer step (outside a gradient-accumulation "
    "guard), so no `scaler.unscale_(optimizer)` can precede it: if it clips or reads `.grad`, "
    "move it inside the guard, after `scaler.unscale_(optimizer)`.",
    why=(
        "A call the analysis cannot see into runs between backward and step outside the "
        "gradient-accumulation guard, where no `unscale_` can precede it."
    ),
)

GRADIENTS_USED_OUT_OF_REACH = declare(
    "AMP218", SKIP, "gradients used in a function where they cannot be unscaled",
    "Code that clips or reads `.grad` runs between backward and step in another function than "
    "the step (the helper running the backward, or the caller of a helper that steps), and "
    "`scaler.unscale_(optimizer)` cannot go before it there: the optimizer has another name "
    "there, or the function runs more than once per step. The training step stays FP32; "
    "unscale by hand before that code, once per step, to use AMP.",
    why=(
        "Gradients are clipped or read on the way from a backward to its step, in a function "
        "where `unscale_` cannot be placed."
    ),
    example=(
        "def backward(self, loss):\n"
        "    loss.backward()\n"
        "    clip_grad_norm_(self.model.parameters(), 1.0)\n"
        "# backward() is called twice per self.optimizer.step()"
    ),
)

TWO_STEP_OPTIMIZER = declare(
    "AMP216", SKIP, "two-step optimizer (SAM) left in FP32",
    "`optimizer.first_step()` perturbs the weights along the gradients and `second_step()` "
    "steps the base optimizer: a grad scaler can drive neither (`scaler.step` calls `step()`), "
    "so the step and its backward passes stay FP32. Unscale before `first_step` and step "
    "`optimizer.base_optimizer` through the scaler by hand to use AMP.",
    why="A two-step optimizer (SAM: `first_step`/`second_step`) is used.",
    example=(
        "loss.backward()\n"
        "optimizer.first_step(zero_grad=True)\n"
        "criterion(model(x), y).backward()\n"
        "optimizer.second_step()"
    ),
)

BACKWARD_OF_NON_TENSOR = declare(
    "AMP214", SKIP, "`.backward()` of an object that is not a tensor",
    "`self.backward()` or `learner.backward()` is a training-loop object's own method (a "
    "fastai-style Learner, a trainer class), not a loss tensor's: it cannot be scaled. The "
    "tensor's backward inside that method is rewritten where amprewrite sees it. A model's "
    "method that happens to be named `backward` (a normalizing flow's inverse, `z, log_det = "
    "flow.backward(z)`: its result is unpacked, and a tensor's backward returns None) is "
    "left alone the same way.",
    why=(
        "`.backward()` is called on an object that is not a tensor (a trainer's or "
        "Learner's own method, a flow's inverse)."
    ),
    example="learner.backward()   # a Learner's own method, not a tensor's",
)


@dataclass(frozen=True)
class Note:
    """A finding about a node of the original tree (positions are added later)."""

    code: Code
    node: cst.CSTNode
    message: str


@dataclass(frozen=True)
class Region:
    """Statements `start`..`end` of one block, to run under autocast.

    With `hoist`, a backward whose receiver computes the loss inline (`crit(model(x), y)
    .backward()`): the loss is assigned to a variable at the end of the region, and the range
    may be empty (`start == end + 1`, the backward's own position).
    """

    block: Block
    start: int
    end: int
    hoist: BackwardSite | None = None

    @property
    def statements(self) -> list[Statement]:
        return list(body(self.block)[self.start : self.end + 1])


@dataclass
class TrainingSteps:
    """The training steps of a module: what to scale, step, update, unscale, autocast."""

    backwards: list[BackwardSite] = field(default_factory=list)  # to scale
    steps: list[StepSite] = field(default_factory=list)  # to route through the scaler
    updates_after: list[StepSite] = field(default_factory=list)  # steps followed by update()
    updates_at: list[UpdatePoint] = field(default_factory=list)  # other update() positions
    updated_per_step: set[int] = field(default_factory=set)  # ids: update() after each step
    regions: list[Region] = field(default_factory=list)  # forward + loss, to autocast
    unscales: list[Unscale] = field(default_factory=list)  # before clipping / reading .grad
    clips: list[Clip] = field(default_factory=list)  # gradient clipping between backward/step
    grad_reads: list[tuple[Statement, StepSite]] = field(default_factory=list)  # `.grad` reads
    notes: list[Note] = field(default_factory=list)  # sites left alone
    refused: bool = False  # a training step was found but cannot be rewritten safely

    @property
    def found(self) -> bool:
        return bool(self.backwards and self.steps)


def analyse_training(facts: ModuleFacts, kinds: KindTable) -> TrainingSteps:
    """The training steps of a module, in four steps: classify the backward and step sites,
    pair them, plan the scaler's calls, and find the forward passes to autocast."""
    result = TrainingSteps()
    found = _classify_sites(facts, kinds, result)
    backwards, steps = _pair(found, facts, kinds, result)
    if not backwards:
        for site in steps:
            result.notes.append(Note(STEP_WITHOUT_BACKWARD, site.call,
                                     f"`{facts.one_line(site.optimizer)}.step()` has no "
                                     "backward pass in this file to scale; left unchanged"))
        return result
    if _plan_scaler(backwards, steps, facts, kinds, result):
        result.regions = _autocast_regions(backwards, facts, kinds, result)
    return result


@dataclass
class _Sites:
    """The backward and step sites a training step may be made of."""

    scalable: list[BackwardSite] = field(default_factory=list)
    unscaled: list[BackwardSite] = field(default_factory=list)  # left alone: stay unscaled
    steps: list[StepSite] = field(default_factory=list)  # optimizer steps without a closure
    closure_functions: set[str] = field(default_factory=set)  # `optimizer.step(closure)`
    unrecognised: list[StepSite] = field(default_factory=list)  # receivers left alone (AMP202)


def _classify_sites(facts: ModuleFacts, kinds: KindTable, result: TrainingSteps) -> _Sites:
    """Sort each backward and step site, with a note for each left alone (source order)."""
    found = _Sites()
    sites = call_sites(facts, kinds)
    for call_site in facts.calls:
        site = sites.at(call_site.call)
        if isinstance(site, BackwardSite):
            note = _backward_left_alone(site, facts)
            if note is None:
                found.scalable.append(site)
            else:
                result.notes.append(note)
                found.unscaled.append(site)
        elif isinstance(site, StepSite):
            _classify_step(site, facts, sites, found, result)
        elif _two_step(call_site.call, kinds):
            text = facts.one_line(call_site.call.func)
            result.notes.append(Note(TWO_STEP_OPTIMIZER, call_site.call,
                                     f"`{text}()` is one half of a two-step optimizer's step "
                                     "(SAM), which a grad scaler cannot drive; its training "
                                     "step stays FP32"))
    return found


def _pair(
    found: _Sites, facts: ModuleFacts, kinds: KindTable, result: TrainingSteps
) -> tuple[list[BackwardSite], list[StepSite]]:
    """The backward passes whose gradients the optimizer steps consume, and those steps; a
    note for each site that has no partner."""
    unreached = _unreached_by_backward(found.steps, facts, kinds)
    for site in unreached:
        result.notes.append(Note(STEP_WITHOUT_BACKWARD, site.call,
                                 f"`{facts.one_line(site.optimizer)}.step()` steps an "
                                 "optimizer built in this function, where no backward pass "
                                 "runs; left unchanged"))
    steps = [site for site in found.steps if site not in unreached]
    removed: list[StepSite] = []
    keeping: set[cst.ClassDef] = set()  # classes whose `zero_grad` keeps the gradients
    for step in steps:
        keeper = keeps_gradients(step, facts)
        if keeper is not None:
            keeping |= {facts.function_class[keeper], facts.function_class[step.function]}  # type: ignore[index]
            result.notes.append(Note(GRADIENTS_KEPT_ACROSS_STEPS, step.call,
                                     f"`{facts.one_line(step.optimizer)}.step()` adds to the "
                                     f"gradients `{keeper.name.value}()` keeps (it writes "
                                     "`.grad` instead of zeroing it), which a scaler would "
                                     "divide by the scale again; left unchanged"))
            removed.append(step)
    for fed in _fed_unscaled([s for s in steps if s not in removed], found.unscaled, facts):
        result.notes.append(Note(STEP_WITHOUT_BACKWARD, fed.call,
                                 f"`{facts.one_line(fed.optimizer)}.step()` steps the "
                                 "gradients of a backward pass left unscaled; left unchanged"))
        removed.append(fed)
    steps = [site for site in steps if site not in removed]
    notes = len(result.notes)
    backwards = _paired_backwards(found, steps, facts, kinds, result, [])
    left_alone = [*found.unscaled, *(b for b in found.scalable if b not in backwards)]
    mixed = _fed_alongside(steps, left_alone, facts, kinds)
    if not mixed and not removed:
        return backwards, steps
    del result.notes[notes:]
    for fed, call in mixed:
        result.notes.append(Note(STEP_WITHOUT_BACKWARD, fed.call,
                                 f"`{facts.one_line(fed.optimizer)}.step()` would also "
                                 "apply the parameter gradients of a backward left "
                                 f"unscaled, run by `{facts.one_line(call.func)}(...)` "
                                 "since they were last zeroed; left unchanged"))
        removed.append(fed)
    # A backward feeding a step left unchanged stays unscaled, and so does every step it
    # also feeds: a scaled backward before a plain step would step gradients times the scale.
    # (The backwards of a class whose `zero_grad` keeps the gradients feed its steps, from
    # whichever of its methods they run in.)
    held: list[BackwardSite] = []
    while True:
        held = [b for b in found.scalable
                if any(_feeds(b, step, facts, kinds) for step in removed)
                or _method_of(b.function, keeping, facts)]
        more = [step for step in steps if step not in removed
                and any(_feeds(b, step, facts, kinds) for b in held)]
        if not more:
            break
        for step in more:
            result.notes.append(Note(STEP_WITHOUT_BACKWARD, step.call,
                                     f"`{facts.one_line(step.optimizer)}.step()` steps the "
                                     "gradients of a backward pass left unscaled; left "
                                     "unchanged"))
        removed.extend(more)
    steps = [site for site in steps if site not in removed]
    return _paired_backwards(found, steps, facts, kinds, result, held), steps


def _method_of(
    function: cst.FunctionDef | None, classes: set[cst.ClassDef], facts: ModuleFacts
) -> bool:
    return function is not None and facts.function_class.get(function) in classes


def _feeds(backward: BackwardSite, step: StepSite, facts: ModuleFacts, kinds: KindTable) -> bool:
    """`backward` runs, in `step`'s function or a function of the file it calls, since the
    gradients `step` applies were last zeroed."""
    if backward.function is step.function:
        position = facts.order[backward.statement]
        return _since_zeroed(step, facts) < position < facts.order[step.statement]
    called = _called_since_zeroed(step, facts, kinds)
    return any(callee is backward.function for _, callee in called)


def _called_since_zeroed(
    step: StepSite, facts: ModuleFacts, kinds: KindTable
) -> list[tuple[CallSite, cst.FunctionDef]]:
    """The calls of the file's functions in `step`'s function since its gradients were last
    zeroed, each with the function it runs."""
    start, end = _since_zeroed(step, facts), facts.order[step.statement]
    return [(site, callee) for site, callee in summaries_of(facts, kinds).local_calls
            if site.function is step.function and start < facts.order[site.statement] < end]


def _fed_alongside(
    steps: list[StepSite], left_alone: list[BackwardSite], facts: ModuleFacts,
    kinds: KindTable,
) -> list[tuple[StepSite, cst.Call]]:
    """Steps that would also apply the parameter gradients of a backward left unscaled,
    run by a function of the file called since the gradients were last zeroed (`opt.zero_grad();
    x_adv = fgsm(model, x, y)`, whose `loss.backward()` computes the input's gradient, then
    the loss's backward and the step): through the scaler that share would be divided by the
    scale. Each with the call running it."""
    holders = {b.function for b in left_alone if b.function is not None
               and not _zeroes_after(b, facts)}
    if not holders:
        return []
    mixed = []
    for step in steps:
        call = next((site.call for site, callee in _called_since_zeroed(step, facts, kinds)
                     if callee in holders), None)
        if call is not None:
            mixed.append((step, call))
    return mixed


def _zeroes_after(backward: BackwardSite, facts: ModuleFacts) -> bool:
    """Its function zeroes gradients after it (`loss.backward(); ...; model.zero_grad()`)."""
    position = facts.order[backward.statement]
    return any(site.function is backward.function and facts.order[site.statement] > position
               and _zeroes(site.call) for site in facts.calls)


def _since_zeroed(step: StepSite, facts: ModuleFacts) -> int:
    """The source position from which `step`'s gradients accumulate: the last statement of
    its function before it that zeroes gradients, else the innermost loop around it, else the
    function's start."""
    end = facts.order[step.statement]
    zeroing = [facts.order[site.statement] for site in facts.calls
               if site.function is step.function and facts.order[site.statement] < end
               and _zeroes(site.call)]
    if zeroing:
        return max(zeroing)
    loop = facts.enclosing_loop(step.statement)
    if loop is not None:
        return facts.order[loop]
    return facts.order[step.function] if step.function is not None else -1


def _zeroes(call: cst.Call) -> bool:
    """`optimizer.zero_grad()`, `model.zero_grad()`, or a helper called `zero_grad(params)`."""
    return is_zero_grad(call) or dotted(call.func) == "zero_grad"


def _paired_backwards(
    found: _Sites, steps: list[StepSite], facts: ModuleFacts, kinds: KindTable,
    result: TrainingSteps, held: list[BackwardSite],
) -> list[BackwardSite]:
    """The backward passes `steps` consume (not those `held` for steps left unchanged); a
    note for each left alone."""
    backwards: list[BackwardSite] = []
    for backward in found.scalable:
        text, function = backward.shown(facts), backward.function
        if backward in held:
            result.notes.append(Note(BACKWARD_WITHOUT_STEP, backward.call,
                                     f"`{text}` feeds an optimizer step left unchanged; left "
                                     "unchanged"))
        elif function is not None and function.name.value in found.closure_functions:
            result.notes.append(Note(BACKWARD_IN_CLOSURE, backward.call,
                                     f"`{text}` runs inside "
                                     "an optimizer closure, whose step cannot be scaled; "
                                     "left unscaled"))
        elif not steps:
            left = _step_left_alone(backward, found, facts)
            stepper = _stepping_call_after(backward, facts) if left is None else None
            if left is not None:
                message = (f"`{text}` feeds no optimizer step the rewrite can route "
                           f"(`{facts.one_line(left.optimizer)}.step()` is left unchanged, as "
                           "its finding says); left unchanged")
            elif stepper is not None:
                message = (f"`{text}` has no optimizer step in this file: if "
                           f"`{facts.one_line(stepper.func)}()` steps one (a method of an "
                           "object from another module), the rewrite does not route a step "
                           "through it; left unchanged")
            else:
                message = f"`{text}` has no optimizer step in this file; left unchanged"
            result.notes.append(Note(BACKWARD_WITHOUT_STEP, backward.call, message))
        elif _before_the_loop(backward, steps, facts, kinds):
            result.notes.append(Note(BACKWARD_WITHOUT_STEP, backward.call,
                                     f"`{text}` runs before the training loop, "
                                     "whose optimizer steps never see its gradients; left "
                                     "unchanged"))
        elif (function is not None and not _steps_in(function, steps, facts, kinds)
              and reads_grad(function)) or _read_at_module_level(backward, steps, facts, kinds):
            result.notes.append(Note(BACKWARD_WITHOUT_STEP, backward.call,
                                     f"`{text}` computes "
                                     "gradients that are read, not stepped; left unchanged"))
        else:
            backwards.append(backward)
    return backwards


def _stepping_call_after(backward: BackwardSite, facts: ModuleFacts) -> cst.Call | None:
    """The first call after `backward` in its function of a method named for stepping that is
    not `.step()` itself (`optimizer.step_and_update_lr()` of a wrapper from another
    module), of an object the file does not define."""
    position = facts.order[backward.statement]
    own = {f.name.value for f in facts.functions}
    for site in facts.calls:
        func = site.call.func
        if (site.function is backward.function and facts.order[site.statement] >= position
                and isinstance(func, cst.Attribute) and "step" in func.attr.value
                and func.attr.value != "step" and func.attr.value not in own):
            return site.call
    return None


def _step_left_alone(
    backward: BackwardSite, found: _Sites, facts: ModuleFacts
) -> StepSite | None:
    """A `.step()` of the file left alone that this backward may feed: the first after it in
    its function, else the first of the file."""
    candidates = [*found.steps, *found.unrecognised]
    candidates.sort(key=lambda s: facts.order[s.statement])
    position = facts.order[backward.statement]
    return next((s for s in candidates if s.function is backward.function
                 and facts.order[s.statement] > position), candidates[0] if candidates else None)


def _plan_scaler(
    backwards: list[BackwardSite], steps: list[StepSite], facts: ModuleFacts,
    kinds: KindTable, result: TrainingSteps,
) -> bool:
    """Where the scaler's calls go: scale, step, update and unscale before what reads the
    gradients. False, with the reasons, when no placement is safe (the step is refused)."""
    uses = gradient_uses(steps, backwards, facts, GradientReach(facts, kinds),
                         summaries_of(facts, kinds))
    unscales = [_over_elements(u, steps, facts, kinds) for u in uses.unscales]
    protocol = plan_updates(steps, unscales, backwards, facts, kinds)
    unbound = _unbound(steps, unscales, facts)
    unbound += [Note(OPTIMIZER_BOUND_ON_SOME_PATHS, u.optimizer,
                     f"`{facts.one_line(u.optimizer)}` may be None where "
                     "its gradients would be unscaled (no check of it around that point); "
                     "training step left unchanged")
                for u in unscales if _unguarded_none(u, facts)]
    unbound += [Note(GRADIENTS_WITHOUT_OPTIMIZER, line, f"`{facts.one_line(line)}` may use "
                     "the gradients on a path where no optimizer step can unscale them (a "
                     "manual update); training step left unchanged")
                for line in uses.manual]
    unbound += [Note(GRADIENTS_USED_OUT_OF_REACH, use.statement, f"{use.reason} between the "
                     f"backward and `{facts.one_line(use.step.optimizer)}.step()` needs "
                     f"unscaled gradients, but {use.problem}; training step left unchanged")
                for use in uses.elsewhere]
    if protocol.problems or unbound:
        result.refused = True
        result.notes.extend(unbound)
        result.notes.extend(
            Note(p.code, p.node, f"{p.message}; training step left unchanged")
            for p in protocol.problems)
        return False
    result.backwards = backwards
    result.steps = steps
    result.updates_after = protocol.updates_after
    result.updates_at = protocol.updates_at
    result.updated_per_step = protocol.per_step
    result.unscales, result.clips, result.grad_reads = unscales, uses.clips, uses.reads
    for call, step in uses.unguarded:
        result.notes.append(Note(OPAQUE_CALL_ON_SCALED_GRADIENTS, call,
                                 f"`{facts.one_line(call.func)}(...)` runs before "
                                 f"`{facts.one_line(step.optimizer)}.step()` on every "
                                 "micro-batch, where its gradients are still scaled; left "
                                 "as is"))
    return True


def _autocast_regions(
    backwards: list[BackwardSite], facts: ModuleFacts, kinds: KindTable, result: TrainingSteps
) -> list[Region]:
    """The forward pass and loss of each backward, by a backward slice (at the callers when
    the loss is a parameter); a note for each loss computed out of sight."""
    regions: list[Region] = []
    for site in backwards:
        region = region_before(site.statement, site.keys, facts, kinds)
        if _computes_inline(site, facts):
            block, index = facts.position(site.statement)
            start = region.start if region is not None and region.block is block else index
            region = Region(block, start, index - 1, hoist=site)
        at_callers = _regions_at_callers(site, facts, kinds) if (
            region is None or not _runs_forward(region, site, facts, kinds)) else []
        if at_callers:
            regions.extend(at_callers)
        elif region is not None:
            regions.append(region)
        elif bound_keys(site.statement) & site.keys:
            result.notes.append(Note(LOSS_COMPUTED_ELSEWHERE, site.call,
                                     "the loss is computed on the same line as its backward "
                                     "(`;`): put the forward pass on a line of its own to have "
                                     "it autocast; it stays FP32"))
        else:
            result.notes.append(Note(LOSS_COMPUTED_ELSEWHERE, site.call,
                                     "the loss is computed outside this "
                                     "function; wrap its forward pass in `autocast()` there"))
    return merge_regions(regions, facts)


def _backward_left_alone(site: BackwardSite, facts: ModuleFacts) -> Note | None:
    """Why `site` is no loss backward to scale, or None when it is one."""
    if site.kind is BackwardKind.AUTOGRAD_UNPACKED:
        return Note(AUTOGRAD_BACKWARD, site.call, f"`{facts.one_line(site.call)}` passes its "
                    "tensors unpacked, so they cannot be scaled as one; left unchanged")
    if site.kind is BackwardKind.WITH_ARGUMENT:
        # `accelerator.backward(loss)`, `engine.backward(loss)`: a framework owns the
        # backward; `out.backward(grad)` of a tensor the analysis cannot place.
        return Note(BACKWARD_WITH_ARGUMENT, site.call,
                    f"`{facts.one_line(site.call)}` is not a plain loss backward; left unchanged")
    if site.kind is BackwardKind.OBJECT:
        text = facts.one_line(site.loss)
        return Note(BACKWARD_OF_NON_TENSOR, site.call,
                    f"`{text}.backward()`: `{text}` is not a tensor but "
                    "an object with a backward method; left unchanged")
    return None


_TWO_STEP_METHODS = frozenset({"first_step", "second_step"})


def _two_step(call: cst.Call, kinds: KindTable) -> bool:
    """`optimizer.first_step(zero_grad=True)` of SAM (and ASAM, GSAM) on an optimizer."""
    func = call.func
    return (isinstance(func, cst.Attribute) and func.attr.value in _TWO_STEP_METHODS
            and kinds.is_optimizer(func.value))


def _classify_step(
    site: StepSite, facts: ModuleFacts, sites: CallSites, found: _Sites, result: TrainingSteps
) -> None:
    """An optimizer step to route through the scaler, or a note saying why it stays."""
    if not site.steps_optimizer:
        if site.kind is None and not site.with_arguments and _has_backward(
                site.function, sites):
            found.unrecognised.append(site)
            result.notes.append(Note(UNKNOWN_STEP_RECEIVER, site.call,
                                     f"`{facts.one_line(site.optimizer)}.step()`: "
                                     "receiver not recognised as an optimizer; left unchanged"))
        return
    if site.with_arguments:
        for arg in site.call.args:
            name = dotted(arg.value)
            if name is not None:
                found.closure_functions.add(name)
        result.notes.append(Note(CLOSURE_STEP, site.call,
                                 f"`{facts.one_line(site.call)}` cannot be loss-scaled; left "
                                 "unchanged"))
        return
    found.steps.append(site)


def _regions_at_callers(
    site: BackwardSite, facts: ModuleFacts, kinds: KindTable
) -> list[Region]:
    """`def optimize(opt, loss): loss.backward(); opt.step()`: the loss is (computed from) a
    parameter, so its forward pass is where each caller computes the argument. The regions
    there, one per call of the function in the module; none unless every call has one."""
    function = site.function
    if function is None:
        return []
    positional, keyword_only = facts.parameters(function)
    given = site.keys & {*positional, *keyword_only}  # `loss.mean()`, `loss / self.accum`
    if len(given) != 1:
        return []
    key = given.pop()
    name = function.name.value
    regions = []
    for caller in facts.calls:
        if (dotted(caller.call.func) or "").removeprefix("self.") != name:
            continue
        argument = _argument_for(caller.call, key, positional)
        region = None if argument is None or caller.function is function else region_before(
            caller.statement, set(iter_keys(argument)), facts, kinds)
        if region is None:
            return []
        regions.append(region)
    return regions


def _runs_forward(
    region: Region, site: BackwardSite, facts: ModuleFacts, kinds: KindTable
) -> bool:
    """Whether `region` runs a forward pass (itself or through a function of the file): not
    only arithmetic on a loss the function was given (`def backward(self, loss):
    loss.mean().backward()`), whose forward pass is the callers'."""
    summaries = summaries_of(facts, kinds)
    parts: list[cst.CSTNode] = [*body(region.block)[region.start : region.end + 1]]
    if region.hoist is not None:
        parts.append(site.loss)
    return any(summaries.of_node(part, site.function).forward for part in parts)


def _argument_for(
    call: cst.Call, parameter: str, positional: list[str]
) -> cst.BaseExpression | None:
    """The argument `call` passes for `parameter` (a name or attribute, not a computation)."""
    index = positional.index(parameter) if parameter in positional else None
    plain = [arg for arg in call.args if arg.keyword is None and not arg.star]
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == parameter:
            return arg.value if receiver_key(arg.value) is not None else None
    if index is not None and index < len(plain) and not any(a.star for a in call.args):
        value = plain[index].value
        return value if receiver_key(value) is not None else None
    return None


def _unreached_by_backward(
    steps: list[StepSite], facts: ModuleFacts, kinds: KindTable
) -> list[StepSite]:
    """Steps of an optimizer built in the same function, which runs no backward pass itself
    or through the functions it calls: a learning-rate schedule plotted with a dummy model.
    No scaled loss can reach that optimizer: a scaler would refuse to step it."""
    sites = call_sites(facts, kinds)
    candidates = [
        site for site in steps
        if site.function is not None and not _has_backward(site.function, sites)
        and any(b.function is site.function and site.key in b.keys for b in facts.bindings)
    ]
    if not candidates:
        return []
    summaries = summaries_of(facts, kinds)
    return [site for site in candidates
            if not summaries.functions[site.function].backward]  # type: ignore[index]


def _fed_unscaled(
    steps: list[StepSite], unscaled: list[BackwardSite], facts: ModuleFacts
) -> list[StepSite]:
    """Steps that a backward left alone in their function feeds, since their gradients were
    last zeroed and since the step before them (`loss.backward(torch.ones_like(loss))`, a
    WGAN critic's `d_real.backward(mone)` next to a penalty's `gp.backward()`): through the
    scaler they would divide those true gradients by the scale. Every backward feeding one
    step is scaled, or none is."""
    fed = []
    for step in steps:
        end = facts.order[step.statement]
        start = max([_since_zeroed(step, facts),
                     *(facts.order[other.statement] for other in steps
                       if other.function is step.function
                       and facts.order[other.statement] < end)])
        if any(b.function is step.function and start < facts.order[b.statement] < end
               and not _own_backward(b, step) for b in unscaled):
            fed.append(step)
    return fed


def _own_backward(backward: BackwardSite, step: StepSite) -> bool:
    """`optimizer.backward(loss)` before `optimizer.step()`: an optimizer scaling its own
    losses (apex's FP16_Optimizer), on the path where the script steps it as it is (an
    optional apex path turns the grad scaler off there)."""
    func = backward.call.func
    return (isinstance(func, cst.Attribute) and step.key is not None
            and dotted(func.value) == step.key)


def _has_backward(function: cst.FunctionDef | None, sites: CallSites) -> bool:
    return any(site.function is function for site in sites.backwards)


def _before_the_loop(
    backward: BackwardSite, steps: list[StepSite], facts: ModuleFacts, kinds: KindTable
) -> bool:
    """A backward outside any loop, in a function (or module) whose steps all run in a
    training loop it is not in: a demonstration (`out.backward(); print(w.grad)` in a
    notebook's first cells), not a training step. A loop over optimizers is no training
    loop (`for opt in optimizers: opt.step()`)."""
    own = [step for step in steps if step.function is backward.function]
    return (facts.enclosing_loop(backward.statement) is None and bool(own)
            and all(_training_loop(step.statement, facts, kinds) for step in own))


def _read_at_module_level(
    backward: BackwardSite, steps: list[StepSite], facts: ModuleFacts, kinds: KindTable
) -> bool:
    """A backward at module level whose gradients are read and that feeds no step (they are
    zeroed before any step): a notebook's demonstration, gradient descent by hand in a loop
    that steps no optimizer (`w -= lr * w.grad`) or `(a ** 2).backward(); a.grad` before
    the optimizer's cells. Its gradients are read, not stepped."""
    if backward.function is not None or any(_feeds(backward, s, facts, kinds) for s in steps):
        return False
    loop = facts.enclosing_loop(backward.statement)
    if loop is not None:
        return reads_grad(loop) and not any(
            loop in facts.enclosing_statements(step.statement) for step in steps) and not (
            summaries_of(facts, kinds).of_node(loop, None).steps)
    # read before the next backward or step of the module
    start = facts.order[backward.statement]
    ends = [facts.order[site.statement] for site in [*steps, *call_sites(facts, kinds).backwards]
            if site.function is None and facts.order[site.statement] > start]
    end = min(ends, default=len(facts.order))
    return any(start <= facts.order[statement] < end and reads_grad(statement)
               for statement in facts.statements if facts.statements[statement].function is None
               and not isinstance(statement, cst.BaseCompoundStatement))


def _training_loop(statement: Statement, facts: ModuleFacts, kinds: KindTable) -> bool:
    loop = facts.enclosing_loop(statement)
    while loop is not None and optimizer_loop_elements(kinds, loop):
        loop = facts.enclosing_loop(loop)
    return loop is not None


def _steps_in(
    function: cst.FunctionDef, steps: list[StepSite], facts: ModuleFacts, kinds: KindTable
) -> bool:
    """`function` steps an optimizer, itself or through a function of the file it calls."""
    return any(s.function is function for s in steps) or (
        summaries_of(facts, kinds).functions[function].steps)


def _over_elements(
    unscale: Unscale, steps: list[StepSite], facts: ModuleFacts, kinds: KindTable
) -> Unscale:
    """An optimizer that is a loop's element (`for opt in optimizers: opt.step()`) is unscaled
    in a loop of its own when the unscale comes before that loop."""
    step = next(s for s in steps if s.optimizer is unscale.optimizer)
    name = dotted(unscale.optimizer)
    around = set(facts.enclosing_statements(unscale.statement))
    loops: list[cst.CSTNode] = [s for s in facts.enclosing_statements(step.statement)[1:]
                                if isinstance(s, cst.For) and s not in around]
    if step.small is not None:
        loops += [loop for loop in facts.loops if isinstance(loop, cst.CompFor)
                  and facts.owner.get(id(loop)) is step.statement]
    for loop in loops:
        elements = optimizer_loop_elements(kinds, loop)
        if name in elements:
            return replace(unscale, iterate=elements[name][1])
    return unscale


def _unbound(steps: list[StepSite], unscales: list[Unscale], facts: ModuleFacts) -> list[Note]:
    """Each stepped optimizer that may not exist where it is stepped, else where its
    gradients would be unscaled (`unscale_` before a clipping outside the `if` that built it)."""
    notes, unbound = [], set()
    for step in steps:
        if _maybe_unbound(step.key, step.statement, step.guards, facts):
            unbound.add(id(step.optimizer))
            notes.append(Note(OPTIMIZER_BOUND_ON_SOME_PATHS, step.call,
                              f"`{facts.one_line(step.optimizer)}` is bound only on some paths; "
                              "the scaler cannot be used where it may be missing; training step "
                              "left unchanged"))
    for unscale in unscales:
        if id(unscale.optimizer) not in unbound and _maybe_unbound(
                receiver_key(unscale.optimizer), unscale.statement,
                guards_of(unscale.statement, facts), facts):
            notes.append(Note(OPTIMIZER_BOUND_ON_SOME_PATHS, unscale.statement,
                              f"`{facts.one_line(unscale.optimizer)}` is bound only on some "
                              f"paths; `unscale_` before the {unscale.reason} would name it "
                              "where it may be missing; training step left unchanged"))
    return notes


def _maybe_unbound(
    key: str | None, statement: Statement, guards: tuple[cst.If, ...], facts: ModuleFacts
) -> bool:
    """The optimizer `key` may not exist on some path reaching `statement` (its step, or
    where its gradients are unscaled). An attribute the statement's own class sets, if only
    `if self.isTrain:` (pix2pix), does not count: the scaler is created at the top of
    `__init__` and named only where the optimizer already is; nor does an optimizer built
    under `if args.autotune:` where the statement runs under the same test."""
    if key is None:
        return False
    function = facts.statements[statement].function
    cls = facts.function_class.get(function) if function is not None else None
    if key.startswith("self.") and cls is not None and all(
            b.function is not None and facts.function_class.get(b.function) is cls
            for b in facts.bindings if key in b.keys):
        return False
    return may_be_unbound(key, statement, facts) and not bound_under_same_test(
        key, statement, guards, facts)


def _unguarded_none(unscale: Unscale, facts: ModuleFacts) -> bool:
    """The optimizer may be None (`opt = Adam(...) if fine_tune else None`) and no `if`
    around the unscale point tests it."""
    key = receiver_key(unscale.optimizer)
    may_be_none = any(key in b.keys and _none_branch(b.value) for b in facts.bindings)
    function = facts.statements[unscale.statement].function if key is not None else None
    if may_be_none and key is not None and bound_on_every_path(key, unscale.statement, facts) \
            and not any(key in b.keys and _none_branch(b.value)
                        for b in facts.bindings if b.function is function):
        return False  # `self.optimizer = None` in `__init__`, built on every path before here
    return may_be_none and not any(
        isinstance(outer, cst.If) and key in set(iter_keys(outer.test))
        for outer in facts.enclosing_statements(unscale.statement))


def _none_branch(value: cst.BaseExpression) -> bool:
    if isinstance(value, cst.IfExp):
        return _none_branch(value.body) or _none_branch(value.orelse)
    return isinstance(value, cst.Name) and value.value == "None"


def same_iteration(site: CallSite, other: CallSite, facts: ModuleFacts) -> bool:
    """True when `other` (later in the source) runs in the same loop iteration as `site`."""
    if other.function is not site.function:
        return False
    loop = facts.enclosing_loop(site.statement)
    if loop is None:
        return facts.enclosing_loop(other.statement) is None
    return loop in facts.enclosing_statements(other.statement)


# Autocast regions ----------------------------------------------------------------------------
_SCOPE_OR_LOOP = (cst.FunctionDef, cst.ClassDef, cst.For, cst.While)


def region_before(
    statement: Statement, needed: set[str], facts: ModuleFacts, kinds: KindTable
) -> Region | None:
    """The forward-pass statements before `statement` that compute the keys in `needed`, by a
    backward slice through its block (and enclosing non-loop blocks while nothing is found)."""
    current, sites = statement, call_sites(facts, kinds)
    while True:
        block, index = facts.position(current)
        region = _slice_region(block, index, needed, facts, kinds, sites)
        if region is not None:
            return region
        parent = facts.statements[current].parent
        if parent is None or isinstance(parent, _SCOPE_OR_LOOP):
            return None
        current = parent


def _slice_region(
    block: Block, index: int, needed: set[str], facts: ModuleFacts, kinds: KindTable,
    sites: CallSites,
) -> Region | None:
    sliced: list[int] = []
    boundaries: list[int] = []  # backward/step statements the slice passed over
    for position in range(index - 1, -1, -1):
        statement = body(block)[position]
        if _is_step_boundary(statement, sites):
            boundaries.append(position)  # `loss_a.backward(retain_graph=True)`: look further
            continue
        if is_definition(statement):
            continue
        if bound_keys(statement) & needed:
            sliced.append(position)
            needed |= set(iter_keys(statement))
    if not sliced:
        return None
    # A region never holds a backward or a step: it starts after the last one inside its span.
    cut = max((b for b in boundaries if b < max(sliced)), default=-1)
    # The region starts at the forward pass: the first statement that computes something, after
    # the setup (building a model, optimizer, scheduler or criterion) and not a call of a local
    # helper that only loads data.
    # Setup between the forward and the loss (`criterion = nn.SmoothL1Loss()` just before
    # it, a loop zeroing each optimizer's gradients) does not move the start.
    forwards = [p for p in sliced if p > cut and _calls_model(body(block)[p], kinds)]
    first_forward = min(forwards, default=index)
    setup = [p for p in range(first_forward) if _builds_objects(body(block)[p], kinds)]
    after_setup = max(setup, default=-1)
    compute = [p for p in sliced
               if p > max(after_setup, cut) and computes(body(block)[p], facts, kinds)]
    if not compute:
        return None
    # Data preparation before the first model call (`batch = memory.sample(n)`) stays out.
    start = min((p for p in compute if p in forwards), default=min(compute))
    return Region(block, start, max(sliced))


def _computes_inline(site: BackwardSite, facts: ModuleFacts) -> bool:
    """`crit(model(x), y).backward()` alone on its line: the loss can move to a variable."""
    line = site.statement
    return (
        site.method
        and isinstance(line, cst.SimpleStatementLine)
        and len(line.body) == 1
        and isinstance(line.body[0], cst.Expr)
        and line.body[0].value is site.call
        and is_compute(site.loss, facts)
    )


def _is_step_boundary(statement: Statement, sites: CallSites) -> bool:
    """A backward, or the step of an optimizer or scheduler (not `env.step(action)`)."""
    return any(isinstance(site := sites.at(c), BackwardSite) or (
        isinstance(site, StepSite) and _steps_optimizer(site)) for c in calls_in(statement))


def _steps_optimizer(site: StepSite) -> bool:
    return site.kind in (Kind.OPTIMIZER, Kind.SCHEDULER) or (
        site.kind is None and not site.with_arguments)


def _calls_model(statement: Statement, kinds: KindTable) -> bool:
    return any(is_model_call(call, kinds) for call in calls_in(statement))


def _builds_objects(statement: Statement, kinds: KindTable) -> bool:
    """Setup, not a forward: the statement builds a model, optimizer, scheduler or criterion."""
    return any(kinds.of(key) is not None for key in bound_keys(statement))


def merge_regions(regions: list[Region], facts: ModuleFacts) -> list[Region]:
    """Merge overlapping or adjacent regions of a block; drop regions nested in another."""
    by_block: dict[int, list[Region]] = {}
    for region in regions:
        by_block.setdefault(id(region.block), []).append(region)
    merged: list[Region] = []
    for group in by_block.values():
        group.sort(key=lambda r: r.start)
        current = group[0]
        for region in group[1:]:
            if region.start <= current.end + 1:
                end = max(current.end, region.end)
                current = Region(current.block, current.start, end, region.hoist or current.hoist)
            else:
                merged.append(current)
                current = region
        merged.append(current)
    return [r for r in merged if not _nested_in_any(r, merged, facts)]


def _nested_in_any(region: Region, regions: list[Region], facts: ModuleFacts) -> bool:
    ancestors = facts.enclosing_statements(body(region.block)[region.start])[1:]
    for other in regions:
        if other is region:
            continue
        covered = set(map(id, other.statements))
        if any(id(a) in covered for a in ancestors):
            return True
    return False
