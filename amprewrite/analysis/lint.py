"""AMP mistakes in code that already uses AMP (`--check` reports them; a normal run fixes the
fixable ones with the script's own scaler)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import libcst as cst

from amprewrite.analysis.amp_usage import AmpUsage
from amprewrite.analysis.autocast_values import autocast_dtype, turns_off
from amprewrite.analysis.checkpoints import Checkpoints, SavedState
from amprewrite.analysis.definite_binding import may_be_unbound
from amprewrite.analysis.dtype.views import MAYBE_FLOAT16_AUTOCASTS, fixed_device
from amprewrite.analysis.evaluation import under_no_grad
from amprewrite.analysis.facts import CallSite, ModuleFacts, Statement
from amprewrite.analysis.hazards import low_precision_casts, manual_casts
from amprewrite.analysis.kinds import Kind, KindTable
from amprewrite.analysis.lint_evidence import Evidence, Verdict, consistent, split
from amprewrite.analysis.names import dotted
from amprewrite.analysis.sites import (
    BackwardKind,
    BackwardSite,
    StepSite,
    call_sites,
    scaled_step,
)
from amprewrite.analysis.statements import is_backward_call
from amprewrite.analysis.training_step import Note
from amprewrite.analysis.tree import descendants
from amprewrite.analysis.unsafe_losses import unsafe_calls
from amprewrite.analysis.unscaling import Unscale, gradient_uses
from amprewrite.catalog import LINT, SKIP, declare

STEP_BYPASSES_SCALER = declare(
    "AMP601", LINT, "optimizer step bypasses the grad scaler",
    "Fixed: `scaler.step(optimizer)`, so inf/NaN steps are skipped and gradients are unscaled."
    " A safe fix where the protocol check sees the scaler on on every path to the site; where "
    "no path it follows reaches the site, an unsafe one, applied only with `--unsafe-fixes`.",
    why=(
        "A script that already uses a grad scaler steps an optimizer with "
        "`optimizer.step()` after a scaled backward."
    ),
    example=(
        "scaler.scale(loss).backward()\n"
        "-optimizer.step()\n"
        "+scaler.step(optimizer)"
    ),
)

STEP_WITHOUT_UPDATE = declare(
    "AMP602", LINT, "`scaler.step` without `scaler.update`",
    "Fixed: `scaler.update()` after the last step, or the scale never adapts (safe or "
    "unsafe as for AMP601).",
    why="A script steps through `scaler.step` but never calls `scaler.update()`.",
    example=(
        " scaler.step(optimizer)\n"
        "+scaler.update()"
    ),
)

CLIPPING_WITHOUT_UNSCALE = declare(
    "AMP603", LINT, "clipping without `unscale_`",
    "Fixed: `scaler.unscale_(optimizer)` before clipping, which otherwise acts on scaled "
    "gradients (safe or unsafe as for AMP601).",
    why="A script clips scaled gradients without `scaler.unscale_(optimizer)` first.",
)

BACKWARD_IN_AUTOCAST = declare(
    "AMP604", LINT, "backward inside autocast",
    "Move `.backward()` after the `with autocast():` block (the AMP recipe).",
    why="A script calls `.backward()` inside its `with autocast():` block.",
    example=(
        "-with autocast():\n"
        "-    loss = criterion(model(x), y)\n"
        "-    scaler.scale(loss).backward()\n"
        "+with autocast():\n"
        "+    loss = criterion(model(x), y)\n"
        "+scaler.scale(loss).backward()"
    ),
)

CHECKPOINT_WITHOUT_SCALER = declare(
    "AMP605", LINT, "checkpoint without the scaler's state",
    "Fixed: the scaler's `state_dict()` is saved next to the optimizer's, and restored where "
    "the optimizer's is (when the script restores no scaler state and its scaler exists "
    "there); a save that already stores the scaler under its own test is complete. Safe or "
    "unsafe as for AMP601.",
    why="A script with a grad scaler saves a checkpoint without the scaler's state.",
    example=(
        "-torch.save({\"optimizer\": optimizer.state_dict()}, path)\n"
        "+torch.save({\"optimizer\": optimizer.state_dict(), \"scaler\": "
        "scaler.state_dict()}, path)"
    ),
)

BCE_IN_AUTOCAST = declare(
    "AMP607", LINT, "binary cross-entropy inside autocast",
    "It raises on CUDA: use `BCEWithLogitsLoss`, or compute it outside the region on float32 "
    "inputs.",
    why="A script computes binary cross-entropy inside its autocast region.",
    example=(
        "with autocast():\n"
        "    loss = F.binary_cross_entropy(torch.sigmoid(model(x)), y)"
    ),
)

HALF_CAST_NEXT_TO_SCALER = declare(
    "AMP608", LINT, "manual half-precision cast next to a grad scaler",
    "GradScaler cannot unscale float16 gradients, and an optimizer stepping bfloat16 weights "
    "loses small updates: remove the cast and let autocast pick the precision. In a file "
    "amprewrite rewrote (its runtime's scaler, or the plain style's `amp_device`), a cast the "
    "rewrite left is reported as it reported it then (AMP140), so that `--check` agrees "
    "with the rewrite.",
    why="A script with a grad scaler casts its model or inputs to half precision by hand.",
    example=(
        "scaler = torch.amp.GradScaler()\n"
        "model = model.half()"
    ),
)

FP32_PATH_KEPT = declare(
    "AMP630", SKIP, "the author's FP32 path beside its own mixed precision, kept",
    "Nothing to do: wherever this backward or step runs, the script's grad scaler is None or "
    "off (`if scaler is None:`, the FP32 arm of the author's flag), so it is no mistake and "
    "no fix target. The flag that turns the mixed precision on is named at the scaler "
    "(AMP611).",
    why="A plain backward or optimizer step of a script that scales its losses runs only on "
        "paths where the protocol check sees its grad scaler None, unbound or disabled.",
    example=(
        "if fp16_scaler is None:\n"
        "    loss.backward()\n"
        "    optimizer.step()"
    ),
)

UNSCALED_BACKWARD = declare(
    "AMP609", LINT, "unscaled backward in a script that scales",
    "Fixed: `scaler.scale(loss).backward()` (a backward added after the rewrite); never on "
    "the author's FP32 path (AMP630). Safe or unsafe as for AMP601.",
    why="A script that scales its losses has a backward that is not scaled.",
    example=(
        " scaler.scale(loss).backward()\n"
        "-aux_loss.backward()\n"
        "+scaler.scale(aux_loss).backward()"
    ),
)

FLOAT16_WITHOUT_SCALER = declare(
    "AMP610", LINT, "autocast that may be float16, without a grad scaler",
    "Scale the losses with a `torch.amp.GradScaler` (enabled for float16: `enabled=dtype == "
    "torch.float16`), or autocast in bfloat16: without loss scaling, float16 gradients too "
    "small for it underflow to zero and training silently degrades.",
    why=(
        "A script trains (it calls `.backward()`) under an autocast whose dtype is float16 or "
        "not known to be bfloat16, and no grad scaler scales its losses."
    ),
    example=(
        "with torch.autocast(\"cuda\", dtype=torch.float16):\n"
        "    loss = criterion(model(x), y)\n"
        "loss.backward()"
    ),
)
# A module that names loss scaling scales its losses some other way (Megatron's
# `config.grad_scale_func`, DeepSpeed's or apex's loss scalers, a hand-rolled `loss_scale`).
T = TypeVar("T")
_LOSS_SCALING = re.compile(r"(loss|grad)_?scal|scale_?(loss|grad)|LossScaler", re.IGNORECASE)


@dataclass
class Lint:
    """The AMP mistakes of a module that already uses AMP, and the fixable ones."""

    scaler: str | None  # the script's scaler (the first one), which fixes use
    notes: list[Note] = field(default_factory=list)  # every mistake found
    unscaled_backwards: list[BackwardSite] = field(default_factory=list)  # fixable: scale them
    bypassing_steps: list[StepSite] = field(default_factory=list)  # fixable: scaler.step(opt)
    missing_update_after: list[StepSite] = field(default_factory=list)  # fixable: update()
    missing_unscales: list[Unscale] = field(default_factory=list)  # fixable: unscale_ first
    checkpoints: Checkpoints | None = None  # fixable: saves without the scaler's state
    # fixes the checker's reading cannot confirm (no path of its reaches them): applied only
    # with --unsafe-fixes, their notes saying so
    unsafe: Lint | None = None
    unsafe_notes: list[Note] = field(default_factory=list)


def _autograd_backward(site: BackwardSite | StepSite | None) -> bool:
    """Whether a `.backward(...)` call may be autograd's (not a model's own method: a flow's
    inverse, a Learner's backward)."""
    return not (isinstance(site, BackwardSite) and site.kind is BackwardKind.OBJECT)


def lint(facts: ModuleFacts, kinds: KindTable, usage: AmpUsage, saved: Checkpoints) -> Lint:
    scalers = frozenset(usage.scalers) | _scaling_receivers(facts)
    scaler = min(usage.scalers, default=None) or min(scalers, default=None)
    unsafe = Lint(scaler)
    found = Lint(scaler, unsafe=unsafe)
    autocast_blocks = [w for w in usage.unwrap if isinstance(w, cst.With)]
    sites = call_sites(facts, kinds)
    for site in facts.calls:
        inside = _inside_autocast(site.statement, autocast_blocks, facts)
        if is_backward_call(site.call) and inside and _autograd_backward(sites.at(site.call)):
            found.notes.append(Note(BACKWARD_IN_AUTOCAST, site.call,
                                    "backward runs inside an autocast "
                                    "region; move it after the `with` block"))
        if inside and site.call in unsafe_calls(site.call, facts, kinds):
            found.notes.append(Note(BCE_IN_AUTOCAST, site.call,
                                    "binary cross-entropy inside autocast "
                                    "raises on CUDA; use `BCEWithLogitsLoss` or compute it "
                                    "outside on float32 inputs"))
    if scaler is None:
        if (any(is_backward_call(site.call) for site in facts.calls)
                and not _LOSS_SCALING.search(facts.code)):
            found.notes.extend(
                Note(FLOAT16_WITHOUT_SCALER, call, "this autocast may run in float16 and no "
                     "grad scaler scales the losses: small gradients underflow to zero; add "
                     "`torch.amp.GradScaler` or use `dtype=torch.bfloat16`")
                for call in _maybe_float16_autocasts(facts))
        return found
    if usage.ours:  # the rewrite left these casts, each reported (AMP140): so is it now
        found.notes.extend(manual_casts(facts))
    else:
        found.notes.extend(Note(HALF_CAST_NEXT_TO_SCALER, cast.call, f"`{cast.text}` casts by "
                                f"hand next to a grad scaler; {cast.harm}")
                           for cast in low_precision_casts(facts))
    sites = call_sites(facts, kinds)
    scaled_steps = [scaled_step(s, facts, kinds) for s in facts.calls
                    if _scaler_call(s.call, scalers, "step")]
    updates = [s for s in facts.calls if _scaler_call(s.call, scalers, "update")]
    unscales = [s for s in facts.calls if _scaler_call(s.call, scalers, "unscale_")]
    stepping = {s.function for s in scaled_steps}
    training = stepping | {  # the textbook mistake: scaled backwards, no scaler.step
        s.function for s in facts.calls if is_backward_call(s.call)
        and isinstance(s.call.func, cst.Attribute) and isinstance(s.call.func.value, cst.Call)
        and _scaler_call(s.call.func.value, scalers, "scale")}
    backwards: list[BackwardSite] = []
    steps: list[StepSite] = []
    for call_site in facts.calls:
        typed = sites.at(call_site.call)
        if typed is None or typed.function not in training or typed.call.args:
            continue
        if may_be_unbound(scaler, typed.statement, facts):
            continue  # the FP32 path of AMP behind a flag: `if args.amp: scaler = ...`
        if isinstance(typed, BackwardSite):
            if not (isinstance(typed.loss, cst.Call)
                    and _scaler_call(typed.loss, scalers, "scale")):
                backwards.append(typed)
        elif kinds.of(typed.key) in (Kind.OPTIMIZER, None):
            steps.append(typed)  # of an unknown kind: a mistake only where the checker sees one
    update_after = []
    if scaled_steps and not updates:
        update_after.append(max([*scaled_steps, *steps], key=lambda s: facts.order[s.statement]))
    points = gradient_uses(scaled_steps, sites.backwards, facts).unscales
    clips = [point for point in points if point.reason == "gradient clipping"
             and not _unscaled_before(point, unscales, facts)]
    unsaved = [s for s in saved.saved if not _saves_scaler(s, scalers, facts)]
    reachable = [s for s in unsaved if _reachable(scaler, s.site, facts)]
    evidence = Evidence.of(facts, scaler, [
        *(b.call for b in backwards), *(s.call for s in steps),
        *(s.call for s in update_after), *(p.statement for p in clips),
        *(s.site.call for s in reachable)])
    _judged(found.notes, found, unsafe, scaler, evidence, backwards, steps, update_after, clips,
            stepping, scaled_steps[-1].call if scaled_steps else None, kinds)
    fixable, report, risky = split(reachable, lambda s: evidence.site(s.site.call))
    if fixable or risky:
        restored = [] if any(_scaler_call(s.call, scalers, "load_state_dict")
                             for s in facts.calls) else saved.restored
        restores = [r for r in restored if _reachable(scaler, r.site, facts)
                    and not may_be_unbound(scaler, r.site.statement, facts)]
        if fixable:
            found.checkpoints = Checkpoints(fixable, restores, saved.key)
        if risky:
            unsafe.checkpoints = Checkpoints(risky, restores, saved.key)
        found.notes.extend(Note(CHECKPOINT_WITHOUT_SCALER, r.site.call,
                                f"the optimizer's state is restored where `{scaler}` does not "
                                "exist yet: restore the scaler's state after creating it")
                           for r in restored if r not in restores)
    for state in unsaved:
        message = "checkpoint saves the optimizer but not the grad scaler's state"
        if state not in reachable:
            message += (f": `{scaler}` is not reachable here, save the scaler's "
                        "`state_dict()` next to the optimizer's")
        elif state in report:
            message += (f": `{scaler}` may be None or unset here, save its `state_dict()` where it "
                        "exists")
        note = Note(CHECKPOINT_WITHOUT_SCALER, state.entry, message)
        found.notes.append(note)
        if state in risky:
            found.unsafe_notes.append(note)
    return found


def _judged(
    notes: list[Note], found: Lint, unsafe: Lint, scaler: str, evidence: Evidence,
    backwards: list[BackwardSite], steps: list[StepSite], update_after: list[StepSite],
    clips: list[Unscale], stepping: set[cst.FunctionDef | None], last_scaled: cst.Call | None,
    kinds: KindTable,
) -> None:
    """Each candidate mistake as the checker's reading judges it: fixed, reported only,
    offered as an unsafe fix, or dropped (no mistake on any path)."""
    def sort_out(items: list[T], node: Callable[[T], cst.CSTNode],
                 verdict: Callable[[cst.CSTNode], Verdict], note: Callable[[T], Note],
                 fixes: list[T], unsafe_fixes: list[T]) -> None:
        fp32: list[T] = []
        safe, report, risky = split(items, lambda item: verdict(node(item)), fp32)
        notes.extend(Note(FP32_PATH_KEPT, node(item), f"the author's FP32 path: `{scaler}` is "
                          "None or off wherever this runs; kept as written") for item in fp32)
        fixes.extend(safe)
        unsafe_fixes.extend(risky)
        for item in [*safe, *report, *risky]:
            notes.append(note(item))
            if item in risky:
                found.unsafe_notes.append(notes[-1])

    step_verdicts: dict[cst.CSTNode, Verdict] = {
        s.call: evidence.site(s.call) if s.function in stepping
        and kinds.of(s.key) is Kind.OPTIMIZER else evidence.plain_step(s.call) for s in steps}
    backward_verdicts: dict[cst.CSTNode, Verdict] = {
        b.call: evidence.site(b.call) if b.function in stepping
        else evidence.feeding_backward(b.call) for b in backwards}
    consistent(evidence, backward_verdicts, step_verdicts)

    def step(call: cst.CSTNode) -> Verdict:
        return step_verdicts[call]

    def backward(call: cst.CSTNode) -> Verdict:
        return backward_verdicts[call]

    sort_out(backwards, lambda b: b.call, backward, lambda b: Note(
        UNSCALED_BACKWARD, b.call, "unscaled backward in a script that scales its losses: "
        f"use `{scaler}.scale(...)`"), found.unscaled_backwards, unsafe.unscaled_backwards)
    sort_out(steps, lambda s: s.call, step, lambda s: Note(
        STEP_BYPASSES_SCALER, s.call, f"optimizer step bypasses the grad scaler: use "
        f"`{scaler}.step(...)`"), found.bypassing_steps, unsafe.bypassing_steps)
    sort_out(update_after, lambda s: s.call, evidence.site, lambda s: Note(
        STEP_WITHOUT_UPDATE, last_scaled or s.call, f"`{scaler}.step` without "
        f"`{scaler}.update()`: the scale never adapts"), found.missing_update_after,
        unsafe.missing_update_after)
    sort_out(clips, lambda p: p.statement, evidence.missing_unscale, lambda p: Note(
        CLIPPING_WITHOUT_UNSCALE, p.statement, "clipping scaled gradients: call "
        f"`{scaler}.unscale_({dotted(p.optimizer) or 'optimizer'})` first"),
        found.missing_unscales, unsafe.missing_unscales)


def _maybe_float16_autocasts(facts: ModuleFacts) -> list[cst.Call]:
    """torch's autocasts that are on, outside no_grad, and not known to run in bfloat16: no
    `dtype=` naming bfloat16, and not the CPU's (`torch.autocast("cpu")` defaults to it)."""
    found = []
    for site in facts.calls:
        call = site.call
        resolved = facts.imports.resolve(call.func)
        if resolved not in MAYBE_FLOAT16_AUTOCASTS or turns_off(call) or under_no_grad(site, facts):
            continue  # off, or an evaluation's: no gradients to underflow
        dtype = autocast_dtype(call, facts)
        if dtype == "bfloat16":
            continue
        arguments = {arg.keyword.value: arg.value for arg in call.args if arg.keyword is not None}
        positional = [arg.value for arg in call.args if arg.keyword is None]
        device = arguments.get("device_type")
        if device is None and fixed_device(resolved) is None and positional:
            device = positional[0]
        names_dtype = "dtype" in arguments or len(positional) > 1
        if not names_dtype and isinstance(device, cst.SimpleString) and "cpu" in device.value:
            continue
        found.append(call)
    return found


def _reachable(scaler: str, site: CallSite, facts: ModuleFacts) -> bool:
    """Whether `scaler` (`scaler`, `self._scaler`) can be named at `site`: an attribute of
    `self` only in a method of a class that assigns it."""
    if not scaler.startswith("self."):
        return True
    cls = facts.function_class.get(site.function) if site.function is not None else None
    return cls is not None and any(
        binding.function is not None and facts.function_class.get(binding.function) is cls
        and scaler in binding.keys for binding in facts.bindings)


def _scaler_call(call: cst.Call, scalers: frozenset[str], method: str) -> bool:
    func = call.func
    return (isinstance(func, cst.Attribute) and func.attr.value == method
            and dotted(func.value) in scalers)


def _inside_autocast(statement: Statement, blocks: list[cst.With], facts: ModuleFacts) -> bool:
    return any(outer in blocks for outer in facts.enclosing_statements(statement)[1:])


def _unscaled_before(point: Unscale, unscales: list[CallSite], facts: ModuleFacts) -> bool:
    """An `unscale_` before the point, or inside it (`if clip: unscale_(...); clip(...)`,
    the point being the statement that holds the gradient use)."""
    return any(facts.order[u.statement] < facts.order[point.statement]
               or point.statement in facts.enclosing_statements(u.statement) for u in unscales)


def _saves_scaler(state: SavedState, scalers: frozenset[str], facts: ModuleFacts) -> bool:
    """Whether a checkpoint holds a scaler's state: the script's scaler, or anything named
    for one (`loss_scaler.state_dict()`, a wrapper around it), in its dict, or stored into
    the variable holding that dict in the same function (`if fp16_scaler is not None:
    save_dict["fp16_scaler"] = fp16_scaler.state_dict()`)."""
    container = state.container
    if container is None:
        return True  # `state["optimizer"] = ...` lines: not checked
    if any(_scaler_state(node, scalers) for node in descendants(container)):
        return True
    variable = _bound_to(container, facts)
    return variable is not None and any(
        _scaler_state(site.call, scalers) and site.function is state.site.function
        and _stored_into(site.statement, variable) for site in facts.calls)


def _scaler_state(node: cst.CSTNode, scalers: frozenset[str]) -> bool:
    return isinstance(node, cst.Call) and (
        _scaler_call(node, scalers, "state_dict") or _named_scaler_state(node))


def _bound_to(container: cst.CSTNode, facts: ModuleFacts) -> str | None:
    """The name a dict literal is assigned to (`save_dict = {...}`)."""
    around = facts.statements_around(container)
    line = around[0] if around else None
    if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
        return None
    small = line.body[0]
    if (isinstance(small, cst.Assign) and small.value is container and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Name)):
        return small.targets[0].target.value
    return None


def _stored_into(statement: Statement, variable: str) -> bool:
    """`variable[...] = ...` or `variable.update(...)`."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    for small in statement.body:
        if isinstance(small, cst.Assign) and any(
                isinstance(t.target, cst.Subscript) and dotted(t.target.value) == variable
                for t in small.targets):
            return True
        if (isinstance(small, cst.Expr) and isinstance(small.value, cst.Call)
                and dotted(small.value.func) == f"{variable}.update"):
            return True
    return False


def _scaling_receivers(facts: ModuleFacts) -> frozenset[str]:
    """What scales a loss that is then differentiated (`scaler.scale(loss).backward()`): a
    scaler, though nothing here creates it (a parameter, an attribute set elsewhere)."""
    found = set()
    for site in facts.calls:
        func = site.call.func
        if (is_backward_call(site.call) and isinstance(func, cst.Attribute)
                and isinstance(func.value, cst.Call) and isinstance(func.value.func, cst.Attribute)
                and func.value.func.attr.value == "scale"):
            key = dotted(func.value.func.value)
            if key is not None:
                found.add(key)
    return frozenset(found)


def _named_scaler_state(call: cst.Call) -> bool:
    func = call.func
    return (isinstance(func, cst.Attribute) and func.attr.value == "state_dict"
            and "scaler" in (dotted(func.value) or "").rsplit(".", 1)[-1].lower())
