"""Facts about the training steps of a module: what to scale, step, update and autocast.

A training step is a backward pass whose gradients an optimizer steps. Backward and step
sites are paired module-wide (scripts spread them over functions); a module whose backward
passes feed no optimizer step here, or whose steps see no backward here, is left alone,
because scaling one side without the other would corrupt the gradients.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis.definite_binding import bound_on_every_path, may_be_unbound
from amprewrite.analysis.facts import Block, CallSite, ModuleFacts, Statement
from amprewrite.analysis.forward import computes, is_model_call
from amprewrite.analysis.kinds import (
    RECEIVER_KINDS,
    Kind,
    KindTable,
    kind_from_name,
    optimizer_loop_elements,
)
from amprewrite.analysis.names import bound_keys, dotted, iter_keys, receiver_key
from amprewrite.analysis.opaque_calls import GradientReach
from amprewrite.analysis.scaler_protocol import (
    GRADIENTS_WITHOUT_OPTIMIZER,
    UpdatePoint,
    plan_updates,
)
from amprewrite.analysis.statements import (
    calls_in,
    is_backward_call,
    is_compute,
    is_definition,
    is_step_call,
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
    "AMP206", SKIP, "`torch.autograd.backward` call",
    "Scale the tensors yourself: `torch.autograd.backward(scaler.scale(loss))`.",
    why="`torch.autograd.backward(...)` is called instead of a loss's `.backward()`.",
    example=(
        "torch.autograd.backward(loss)\n"
        "# write: torch.autograd.backward(scaler.scale(loss))"
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
    "may not exist. Create it on every path.",
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
    "tensor's backward inside that method is rewritten where amprewrite sees it.",
    why=(
        "`.backward()` is called on an object that is not a tensor (a trainer's or "
        "Learner's own method)."
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
    hoist: CallSite | None = None

    @property
    def statements(self) -> list[Statement]:
        return list(self.block.body[self.start : self.end + 1])


@dataclass
class TrainingSteps:
    """The training steps of a module: what to scale, step, update, unscale, autocast."""

    backwards: list[CallSite] = field(default_factory=list)  # to scale
    steps: list[CallSite] = field(default_factory=list)  # to route through the scaler
    updates_after: list[CallSite] = field(default_factory=list)  # steps followed by update()
    updates_at: list[UpdatePoint] = field(default_factory=list)  # other update() positions
    regions: list[Region] = field(default_factory=list)  # forward + loss, to autocast
    unscales: list[Unscale] = field(default_factory=list)  # before clipping / reading .grad
    clips: list[Clip] = field(default_factory=list)  # gradient clipping between backward/step
    notes: list[Note] = field(default_factory=list)  # sites left alone
    refused: bool = False  # a training step was found but cannot be rewritten safely

    @property
    def found(self) -> bool:
        return bool(self.backwards and self.steps)


def analyse_training(facts: ModuleFacts, kinds: KindTable) -> TrainingSteps:
    result = TrainingSteps()
    backwards: list[CallSite] = []
    unscaled: list[CallSite] = []  # backward passes left alone: they stay unscaled
    optimizer_steps: list[CallSite] = []
    closure_functions: set[str] = set()
    for site in facts.calls:
        if is_backward_call(site.call):
            plain = _classify_backward(site, facts, kinds, result)
            (backwards if plain else unscaled).append(site)
        elif is_step_call(site.call):
            _classify_step(site, kinds, facts, optimizer_steps, closure_functions, result)
        elif _two_step(site.call, kinds):
            text = facts.one_line(site.call.func)
            result.notes.append(Note(TWO_STEP_OPTIMIZER, site.call,
                                     f"`{text}()` is one half of a two-step optimizer's step "
                                     "(SAM), which a grad scaler cannot drive; its training "
                                     "step stays FP32"))

    unreached = _unreached_by_backward(optimizer_steps, facts, kinds)
    for site in unreached:
        result.notes.append(Note(STEP_WITHOUT_BACKWARD, site.call,
                                 f"`{facts.one_line(site.call.func.value)}.step()` steps an "  # type: ignore[attr-defined]
                                 "optimizer built in this function, where no backward pass "
                                 "runs; left unchanged"))
    optimizer_steps = [site for site in optimizer_steps if site not in unreached]
    for site in _fed_unscaled(optimizer_steps, backwards, unscaled, facts):
        result.notes.append(Note(STEP_WITHOUT_BACKWARD, site.call,
                                 f"`{facts.one_line(site.call.func.value)}.step()` steps the "  # type: ignore[attr-defined]
                                 "gradients of a backward pass left unscaled; left unchanged"))
        optimizer_steps.remove(site)

    training_backwards = []
    for site in backwards:
        text = facts.one_line(site.call.func.value)  # type: ignore[attr-defined]
        if site.function is not None and site.function.name.value in closure_functions:
            result.notes.append(Note(BACKWARD_IN_CLOSURE, site.call,
                                     f"`{text}.backward()` runs inside "
                                     "an optimizer closure, whose step cannot be scaled; "
                                     "left unscaled"))
        elif not optimizer_steps:
            result.notes.append(Note(BACKWARD_WITHOUT_STEP, site.call,
                                     f"`{text}.backward()` has no optimizer "
                                     "step in this file; left unchanged"))
        elif _before_the_loop(site, optimizer_steps, facts, kinds):
            result.notes.append(Note(BACKWARD_WITHOUT_STEP, site.call,
                                     f"`{text}.backward()` runs before the training loop, "
                                     "whose optimizer steps never see its gradients; left "
                                     "unchanged"))
        elif (site.function is not None and not _steps_in(site.function, optimizer_steps)
              and reads_grad(site.function)):
            result.notes.append(Note(BACKWARD_WITHOUT_STEP, site.call,
                                     f"`{text}.backward()` computes "
                                     "gradients that are read, not stepped; left unchanged"))
        else:
            training_backwards.append(site)

    if not training_backwards:
        for site in optimizer_steps:
            text = facts.one_line(site.call.func.value)  # type: ignore[attr-defined]
            result.notes.append(Note(STEP_WITHOUT_BACKWARD, site.call,
                                     f"`{text}.step()` has no backward pass "
                                     "in this file to scale; left unchanged"))
        return result

    uses = gradient_uses(optimizer_steps, training_backwards, facts, GradientReach(facts, kinds))
    unscales = [_over_elements(u, optimizer_steps, facts, kinds) for u in uses.unscales]
    protocol = plan_updates(optimizer_steps, unscales, training_backwards, facts, kinds)
    unbound = [Note(OPTIMIZER_BOUND_ON_SOME_PATHS, s.call, f"`{facts.one_line(s.call.func.value)}` "  # type: ignore[attr-defined]
                    "is bound only on some paths; the scaler cannot be used where it may be "
                    "missing; training step left unchanged")
               for s in optimizer_steps if _maybe_unbound(s, facts)]
    unbound += [Note(OPTIMIZER_BOUND_ON_SOME_PATHS, u.optimizer,
                     f"`{facts.one_line(u.optimizer)}` may be None where "
                     "its gradients would be unscaled (no check of it around that point); "
                     "training step left unchanged")
                for u in unscales if _unguarded_none(u, facts)]
    unbound += [Note(GRADIENTS_WITHOUT_OPTIMIZER, line, f"`{facts.one_line(line)}` may use "
                     "the gradients on a path where no optimizer step can unscale them (a "
                     "manual update); training step left unchanged")
                for line in uses.manual]
    if protocol.problems or unbound:
        result.refused = True
        result.notes.extend(unbound)
        result.notes.extend(
            Note(p.code, p.node, f"{p.message}; training step left unchanged")
            for p in protocol.problems)
        return result
    result.backwards = training_backwards
    result.steps = optimizer_steps
    result.updates_after = protocol.updates_after
    result.updates_at = protocol.updates_at
    result.unscales, result.clips = unscales, uses.clips
    for call, step in uses.unguarded:
        optimizer = facts.one_line(step.call.func.value)  # type: ignore[attr-defined]
        result.notes.append(Note(OPAQUE_CALL_ON_SCALED_GRADIENTS, call,
                                 f"`{facts.one_line(call.func)}(...)` runs before "
                                 f"`{optimizer}.step()` on every micro-batch, where its "
                                 "gradients are still scaled; left as is"))
    regions: list[Region] = []
    for site in training_backwards:
        region = _loss_region(site, facts, kinds)
        if _computes_inline(site, facts):
            block, index = facts.position(site.statement)
            start = region.start if region is not None and region.block is block else index
            region = Region(block, start, index - 1, hoist=site)
        if region is not None:
            regions.append(region)
        elif at_callers := _regions_at_callers(site, facts, kinds):
            regions.extend(at_callers)
        elif bound_keys(site.statement) & set(iter_keys(site.call.func.value)):  # type: ignore[attr-defined]
            result.notes.append(Note(LOSS_COMPUTED_ELSEWHERE, site.call,
                                     "the loss is computed on the same line as its backward "
                                     "(`;`): put the forward pass on a line of its own to have "
                                     "it autocast; it stays FP32"))
        else:
            result.notes.append(Note(LOSS_COMPUTED_ELSEWHERE, site.call,
                                     "the loss is computed outside this "
                                     "function; wrap its forward pass in `autocast()` there"))
    result.regions = merge_regions(regions, facts)
    return result


def _classify_backward(
    site: CallSite, facts: ModuleFacts, kinds: KindTable, result: TrainingSteps
) -> bool:
    """Whether `site` is a plain loss backward to scale; else the note saying why it stays."""
    receiver = site.call.func.value  # type: ignore[attr-defined]
    if facts.imports.resolve(site.call.func) == "torch.autograd.backward":
        result.notes.append(Note(AUTOGRAD_BACKWARD, site.call,
                                 "`torch.autograd.backward(...)` "
                                 "is not loss-scaled automatically; left unchanged"))
    elif any(arg.keyword is None for arg in site.call.args) and not _seeded_backward(
            site.call, facts, kinds):
        # `accelerator.backward(loss)`, `engine.backward(loss)`: a framework owns the
        # backward; `out.backward(grad)` of a tensor the analysis cannot place.
        result.notes.append(Note(BACKWARD_WITH_ARGUMENT, site.call,
                                 f"`{facts.one_line(site.call)}` "
                                 "is not a plain loss backward; left unchanged"))
    elif _not_a_tensor(receiver, facts, kinds):
        text = facts.one_line(receiver)
        result.notes.append(Note(BACKWARD_OF_NON_TENSOR, site.call,
                                 f"`{text}.backward()`: `{text}` is not a tensor but "
                                 "an object with a backward method; left unchanged"))
    else:
        return True
    return False


def _seeded_backward(call: cst.Call, facts: ModuleFacts, kinds: KindTable) -> bool:
    """`errD_real.backward(one)` (WGAN): a model output's backward seeded with a gradient.
    Scaling the output scales the gradients the seed produces, as for a loss."""
    receiver = call.func.value  # type: ignore[attr-defined]
    key = receiver_key(receiver)
    if key is None or len(call.args) != 1 or call.args[0].star:
        return False
    values = [b.value for b in facts.bindings if b.keys == (key,)]
    return bool(values) and all(_model_output(value, kinds) for value in values)


def _model_output(value: cst.BaseExpression, kinds: KindTable) -> bool:
    """A model's output, or arithmetic and tensor methods on one (`netD(x).mean(0).view(1)`)."""
    if isinstance(value, cst.BinaryOperation):
        return _model_output(value.left, kinds) or _model_output(value.right, kinds)
    if isinstance(value, cst.UnaryOperation):
        return _model_output(value.expression, kinds)
    if not isinstance(value, cst.Call):
        return False
    if is_model_call(value, kinds):
        return True
    return isinstance(value.func, cst.Attribute) and _model_output(value.func.value, kinds)


_TWO_STEP_METHODS = frozenset({"first_step", "second_step"})


def _two_step(call: cst.Call, kinds: KindTable) -> bool:
    """`optimizer.first_step(zero_grad=True)` of SAM (and ASAM, GSAM) on an optimizer."""
    func = call.func
    return (isinstance(func, cst.Attribute) and func.attr.value in _TWO_STEP_METHODS
            and kinds.is_optimizer(func.value))


def _not_a_tensor(receiver: cst.BaseExpression, facts: ModuleFacts, kinds: KindTable) -> bool:
    """`self`, a model or optimizer, or an object every binding builds from a class that is
    not torch's (`learn = Learner(...)`): whatever its `.backward()` does, it is no loss."""
    key = receiver_key(receiver)
    if key is None:
        return False
    if key in ("self", "cls") or kinds.of(key) in (Kind.MODEL, Kind.OPTIMIZER, Kind.SCHEDULER):
        return True
    values = [b.value for b in facts.bindings if b.keys == (key,)]
    return bool(values) and all(_builds_object(value, facts) for value in values)


def _builds_object(value: cst.BaseExpression, facts: ModuleFacts) -> bool:
    """`Learner(...)`: a class the module defines, or one it imports from outside torch (not
    an instance with a capitalised name, `self.BCE_loss(out, y)`)."""
    if not isinstance(value, cst.Call):
        return False
    name = dotted(value.func)
    if name is None or not name.rsplit(".", 1)[-1][:1].isupper():
        return False
    if name in {cls.name.value for cls in facts.classes}:
        return True
    resolved = facts.imports.resolve(value.func)
    return resolved is not None and not resolved.startswith("torch.")


# Step sites ---------------------------------------------------------------------------------
def _classify_step(
    site: CallSite,
    kinds: KindTable,
    facts: ModuleFacts,
    optimizer_steps: list[CallSite],
    closure_functions: set[str],
    result: TrainingSteps,
) -> None:
    receiver = site.call.func.value  # type: ignore[attr-defined]
    key = receiver_key(receiver)
    kind = kinds.of(key) or kind_from_name(key, RECEIVER_KINDS)
    if kind is not Kind.OPTIMIZER:
        if kind is None and not site.call.args and _has_backward(site.function, facts):
            result.notes.append(Note(UNKNOWN_STEP_RECEIVER, site.call,
                                     f"`{facts.one_line(receiver)}.step()`: "
                                     "receiver not recognised as an optimizer; left unchanged"))
        return
    if site.call.args:
        for arg in site.call.args:
            name = dotted(arg.value)
            if name is not None:
                closure_functions.add(name)
        result.notes.append(Note(CLOSURE_STEP, site.call,
                                 f"`{facts.one_line(site.call)}` cannot be loss-scaled; left "
                                 "unchanged"))
        return
    optimizer_steps.append(site)


def _regions_at_callers(site: CallSite, facts: ModuleFacts, kinds: KindTable) -> list[Region]:
    """`def optimize(opt, loss): loss.backward(); opt.step()`: the loss is a parameter, so its
    forward pass is where each caller computes the argument. The regions there, one per call
    of the function in the module; none unless every call has one."""
    function, key = site.function, receiver_key(site.call.func.value)  # type: ignore[attr-defined]
    if function is None or key is None:
        return []
    positional, keyword_only = facts.parameters(function)
    if key not in (*positional, *keyword_only):
        return []
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
    steps: list[CallSite], facts: ModuleFacts, kinds: KindTable
) -> list[CallSite]:
    """Steps of an optimizer built in the same function, which runs no backward pass itself
    or through the functions it calls: a learning-rate schedule plotted with a dummy model.
    No scaled loss can reach that optimizer: a scaler would refuse to step it."""
    candidates = [
        site for site in steps
        if site.function is not None and not _has_backward(site.function, facts)
        and any(b.function is site.function
                and receiver_key(site.call.func.value) in b.keys  # type: ignore[attr-defined]
                for b in facts.bindings)
    ]
    if not candidates:
        return []
    summaries = summaries_of(facts, kinds)
    return [site for site in candidates
            if not summaries.functions[site.function].backward]  # type: ignore[index]


def _fed_unscaled(
    steps: list[CallSite], backwards: list[CallSite], unscaled: list[CallSite],
    facts: ModuleFacts,
) -> list[CallSite]:
    """Steps whose last backward before them in their function is one left alone
    (`loss.backward(torch.ones_like(loss))`): through the scaler they would divide true
    gradients by the scale."""
    fed = []
    for step in steps:
        end = facts.order[step.statement]
        before = [b for b in [*backwards, *unscaled]
                  if b.function is step.function and facts.order[b.statement] < end]
        if before and max(before, key=lambda b: facts.order[b.statement]) in unscaled:
            fed.append(step)
    return fed


def _has_backward(function: cst.FunctionDef | None, facts: ModuleFacts) -> bool:
    return any(s.function is function and is_backward_call(s.call) for s in facts.calls)


def _before_the_loop(
    backward: CallSite, steps: list[CallSite], facts: ModuleFacts, kinds: KindTable
) -> bool:
    """A backward outside any loop, in a function (or module) whose steps all run in a
    training loop it is not in: a demonstration (`out.backward(); print(w.grad)` in a
    notebook's first cells), not a training step. A loop over optimizers is no training
    loop (`for opt in optimizers: opt.step()`)."""
    own = [step for step in steps if step.function is backward.function]
    return (facts.enclosing_loop(backward.statement) is None and bool(own)
            and all(_training_loop(step.statement, facts, kinds) for step in own))


def _training_loop(statement: Statement, facts: ModuleFacts, kinds: KindTable) -> bool:
    loop = facts.enclosing_loop(statement)
    while loop is not None and optimizer_loop_elements(kinds, loop):
        loop = facts.enclosing_loop(loop)
    return loop is not None


def _steps_in(function: cst.FunctionDef | None, steps: list[CallSite]) -> bool:
    return any(s.function is function for s in steps)


def _over_elements(
    unscale: Unscale, steps: list[CallSite], facts: ModuleFacts, kinds: KindTable
) -> Unscale:
    """An optimizer that is a loop's element (`for opt in optimizers: opt.step()`) is unscaled
    in a loop of its own when the unscale comes before that loop."""
    step = next(s for s in steps if s.call.func.value is unscale.optimizer)  # type: ignore[attr-defined]
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
            return Unscale(unscale.statement, unscale.optimizer, unscale.reason,
                           iterate=elements[name][1])
    return unscale


def _maybe_unbound(step: CallSite, facts: ModuleFacts) -> bool:
    """The stepped optimizer may not exist on some path reaching the step. An attribute the
    step's own class sets, if only `if self.isTrain:` (pix2pix), does not count: the scaler
    is created at the top of `__init__` and named only where the optimizer already is."""
    key = receiver_key(step.call.func.value)  # type: ignore[attr-defined]
    if key is None:
        return False
    cls = facts.function_class.get(step.function) if step.function is not None else None
    if key.startswith("self.") and cls is not None and all(
            b.function is not None and facts.function_class.get(b.function) is cls
            for b in facts.bindings if key in b.keys):
        return False
    return may_be_unbound(key, step.statement, facts)


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


def _loss_region(site: CallSite, facts: ModuleFacts, kinds: KindTable) -> Region | None:
    """The statements computing the loss that `site` backpropagates, by a backward slice."""
    needed = set(iter_keys(site.call.func.value))  # type: ignore[attr-defined]
    return region_before(site.statement, needed, facts, kinds)


def region_before(
    statement: Statement, needed: set[str], facts: ModuleFacts, kinds: KindTable
) -> Region | None:
    """The forward-pass statements before `statement` that compute the keys in `needed`, by a
    backward slice through its block (and enclosing non-loop blocks while nothing is found)."""
    current = statement
    while True:
        block, index = facts.position(current)
        region = _slice_region(block, index, needed, facts, kinds)
        if region is not None:
            return region
        parent = facts.statements[current].parent
        if parent is None or isinstance(parent, _SCOPE_OR_LOOP):
            return None
        current = parent


def _slice_region(
    block: Block, index: int, needed: set[str], facts: ModuleFacts, kinds: KindTable
) -> Region | None:
    sliced: list[int] = []
    boundaries: list[int] = []  # backward/step statements the slice passed over
    for position in range(index - 1, -1, -1):
        statement = block.body[position]
        if _is_step_boundary(statement, kinds):
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
    forwards = [p for p in sliced if p > cut and _calls_model(block.body[p], kinds)]
    first_forward = min(forwards, default=index)
    setup = [p for p in range(first_forward) if _builds_objects(block.body[p], kinds)]
    after_setup = max(setup, default=-1)
    compute = [p for p in sliced
               if p > max(after_setup, cut) and computes(block.body[p], facts, kinds)]
    if not compute:
        return None
    # Data preparation before the first model call (`batch = memory.sample(n)`) stays out.
    start = min((p for p in compute if p in forwards), default=min(compute))
    return Region(block, start, max(sliced))


def _computes_inline(site: CallSite, facts: ModuleFacts) -> bool:
    """`crit(model(x), y).backward()` alone on its line: the loss can move to a variable."""
    line = site.statement
    return (
        isinstance(line, cst.SimpleStatementLine)
        and len(line.body) == 1
        and isinstance(line.body[0], cst.Expr)
        and line.body[0].value is site.call
        and is_compute(site.call.func.value, facts)  # type: ignore[attr-defined]
    )


def _is_step_boundary(statement: Statement, kinds: KindTable) -> bool:
    """A backward, or the step of an optimizer or scheduler (not `env.step(action)`)."""
    return any(is_backward_call(c) or (is_step_call(c) and _steps_optimizer(c, kinds))
               for c in calls_in(statement))


def _steps_optimizer(call: cst.Call, kinds: KindTable) -> bool:
    key = receiver_key(call.func.value)  # type: ignore[attr-defined]
    kind = kinds.of(key) or kind_from_name(key, RECEIVER_KINDS)
    return kind in (Kind.OPTIMIZER, Kind.SCHEDULER) or (kind is None and not call.args)


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
    ancestors = facts.enclosing_statements(region.block.body[region.start])[1:]
    for other in regions:
        if other is region:
            continue
        covered = set(map(id, other.statements))
        if any(id(a) in covered for a in ancestors):
            return True
    return False
