"""AMP mistakes in code that already uses AMP (`--check` reports them; a normal run fixes the
fixable ones with the script's own scaler)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis.amp_usage import AmpUsage
from amprewrite.analysis.autocast_values import AUTOCASTS, autocast_dtype, turns_off
from amprewrite.analysis.checkpoints import Checkpoints
from amprewrite.analysis.definite_binding import may_be_unbound
from amprewrite.analysis.evaluation import under_no_grad
from amprewrite.analysis.facts import CallSite, ModuleFacts, Statement
from amprewrite.analysis.hazards import low_precision_casts, manual_casts
from amprewrite.analysis.kinds import Kind, KindTable
from amprewrite.analysis.names import dotted
from amprewrite.analysis.sites import BackwardSite, StepSite, call_sites, scaled_step
from amprewrite.analysis.statements import is_backward_call
from amprewrite.analysis.training_step import Note
from amprewrite.analysis.tree import descendants
from amprewrite.analysis.unsafe_losses import unsafe_calls
from amprewrite.analysis.unscaling import Unscale, gradient_uses
from amprewrite.catalog import LINT, declare

STEP_BYPASSES_SCALER = declare(
    "AMP601", LINT, "optimizer step bypasses the grad scaler",
    "Fixed: `scaler.step(optimizer)`, so inf/NaN steps are skipped and gradients are unscaled.",
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
    "Fixed: `scaler.update()` after the last step, or the scale never adapts.",
    why="A script steps through `scaler.step` but never calls `scaler.update()`.",
    example=(
        " scaler.step(optimizer)\n"
        "+scaler.update()"
    ),
)

CLIPPING_WITHOUT_UNSCALE = declare(
    "AMP603", LINT, "clipping without `unscale_`",
    "Fixed: `scaler.unscale_(optimizer)` before clipping, which otherwise acts on scaled "
    "gradients.",
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
    "there).",
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

UNSCALED_BACKWARD = declare(
    "AMP609", LINT, "unscaled backward in a script that scales",
    "Fixed: `scaler.scale(loss).backward()` (a backward added after the rewrite).",
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
# torch's autocasts whose dtype may be float16 (the CPU's defaults to bfloat16); the runtime's
# `autocast()` comes with its own scaler
_TORCH_AUTOCASTS = AUTOCASTS - {"torch.cpu.amp.autocast", "amprewrite_runtime.autocast"}
# A module that names loss scaling scales its losses some other way (Megatron's
# `config.grad_scale_func`, DeepSpeed's or apex's loss scalers, a hand-rolled `loss_scale`).
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


def lint(facts: ModuleFacts, kinds: KindTable, usage: AmpUsage, saved: Checkpoints) -> Lint:
    scaler = min(usage.scalers, default=None)
    found = Lint(scaler)
    autocast_blocks = [w for w in usage.unwrap if isinstance(w, cst.With)]
    for site in facts.calls:
        inside = _inside_autocast(site.statement, autocast_blocks, facts)
        if is_backward_call(site.call) and inside:
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
                    if _scaler_call(s.call, usage, "step")]
    updates = [s for s in facts.calls if _scaler_call(s.call, usage, "update")]
    unscales = [s for s in facts.calls if _scaler_call(s.call, usage, "unscale_")]
    training = {s.function for s in scaled_steps}
    for call_site in facts.calls:
        typed = sites.at(call_site.call)
        if typed is None or typed.function not in training or typed.call.args:
            continue
        if may_be_unbound(scaler, typed.statement, facts):
            continue  # the FP32 path of AMP behind a flag: `if args.amp: scaler = ...`
        if isinstance(typed, BackwardSite):
            if not (isinstance(typed.loss, cst.Call)
                    and _scaler_call(typed.loss, usage, "scale")):
                found.unscaled_backwards.append(typed)
                found.notes.append(Note(UNSCALED_BACKWARD, typed.call,
                                        "unscaled backward in a script "
                                        f"that scales its losses: use `{scaler}.scale(...)`"))
        elif kinds.of(typed.key) is Kind.OPTIMIZER:
            found.bypassing_steps.append(typed)
            found.notes.append(Note(STEP_BYPASSES_SCALER, typed.call,
                                    "optimizer step bypasses the grad "
                                    f"scaler: use `{scaler}.step(...)`"))
    if scaled_steps and not updates:
        last = max([*scaled_steps, *found.bypassing_steps], key=lambda s: facts.order[s.statement])
        found.missing_update_after.append(last)
        found.notes.append(Note(STEP_WITHOUT_UPDATE, scaled_steps[-1].call,
                                f"`{scaler}.step` without "
                                f"`{scaler}.update()`: the scale never adapts"))
    points = gradient_uses(scaled_steps, sites.backwards, facts).unscales
    for point in points:
        if point.reason == "gradient clipping" and not _unscaled_before(point, unscales, facts):
            optimizer = dotted(point.optimizer) or "optimizer"
            found.missing_unscales.append(point)
            found.notes.append(Note(CLIPPING_WITHOUT_UNSCALE, point.statement,
                                    "clipping scaled gradients: "
                                    f"call `{scaler}.unscale_({optimizer})` first"))
    unsaved = [s for s in saved.saved if not _saves_scaler(s.container, usage)]
    fixable = [s for s in unsaved if _reachable(scaler, s.site, facts)]
    if fixable:
        restored = [] if any(_scaler_call(s.call, usage, "load_state_dict")
                             for s in facts.calls) else saved.restored
        restores = [r for r in restored if _reachable(scaler, r.site, facts)
                    and not may_be_unbound(scaler, r.site.statement, facts)]
        found.checkpoints = Checkpoints(fixable, restores, saved.key)
        found.notes.extend(Note(CHECKPOINT_WITHOUT_SCALER, r.site.call,
                                f"the optimizer's state is restored where `{scaler}` does not "
                                "exist yet: restore the scaler's state after creating it")
                           for r in restored if r not in restores)
    found.notes.extend(Note(CHECKPOINT_WITHOUT_SCALER, s.entry,
                            "checkpoint saves the optimizer but not the grad scaler's state"
                            + ("" if s in fixable else f": `{scaler}` is not reachable here, "
                               "save the scaler's `state_dict()` next to the optimizer's"))
                       for s in unsaved)
    return found


def _maybe_float16_autocasts(facts: ModuleFacts) -> list[cst.Call]:
    """torch's autocasts that are on, outside no_grad, and not known to run in bfloat16: no
    `dtype=` naming bfloat16, and not the CPU's (`torch.autocast("cpu")` defaults to it)."""
    found = []
    for site in facts.calls:
        call = site.call
        resolved = facts.imports.resolve(call.func)
        if resolved not in _TORCH_AUTOCASTS or turns_off(call) or under_no_grad(site, facts):
            continue  # off, or an evaluation's: no gradients to underflow
        dtype = autocast_dtype(call, facts)
        if dtype == "bfloat16":
            continue
        arguments = {arg.keyword.value: arg.value for arg in call.args if arg.keyword is not None}
        positional = [arg.value for arg in call.args if arg.keyword is None]
        device = arguments.get("device_type")
        if device is None and resolved != "torch.cuda.amp.autocast" and positional:
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


def _scaler_call(call: cst.Call, usage: AmpUsage, method: str) -> bool:
    func = call.func
    return (isinstance(func, cst.Attribute) and func.attr.value == method
            and dotted(func.value) in usage.scalers)


def _inside_autocast(statement: Statement, blocks: list[cst.With], facts: ModuleFacts) -> bool:
    return any(outer in blocks for outer in facts.enclosing_statements(statement)[1:])


def _unscaled_before(point: Unscale, unscales: list[CallSite], facts: ModuleFacts) -> bool:
    """An `unscale_` before the point, or inside it (`if clip: unscale_(...); clip(...)`,
    the point being the statement that holds the gradient use)."""
    return any(facts.order[u.statement] < facts.order[point.statement]
               or point.statement in facts.enclosing_statements(u.statement) for u in unscales)


def _saves_scaler(container: cst.CSTNode | None, usage: AmpUsage) -> bool:
    """Whether a checkpoint dict holds a scaler's state: the script's scaler, or anything
    named for one (`loss_scaler.state_dict()`, a wrapper around it)."""
    if container is None:
        return True  # `state["optimizer"] = ...` lines: not checked
    return any(isinstance(node, cst.Call) and (
        _scaler_call(node, usage, "state_dict") or _named_scaler_state(node))
        for node in descendants(container))


def _named_scaler_state(call: cst.Call) -> bool:
    func = call.func
    return (isinstance(func, cst.Attribute) and func.attr.value == "state_dict"
            and "scaler" in (dotted(func.value) or "").rsplit(".", 1)[-1].lower())
