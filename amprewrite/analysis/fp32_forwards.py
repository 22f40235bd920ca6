"""Forward passes on a training path that no autocast region covers: each gets a finding.

A rewrite that leaves part of the training step in FP32 still trains, but slower than the user
asked for and without a word. The training functions (those running a scaled backward or a
step through the scaler) and
the module's functions they call outside a region are searched for model calls, and for calls
the analysis cannot see into that are handed a model (`pgd(model, x, y)` from another module),
that run outside every region: each one is reported where it is, never rewritten.
"""

from __future__ import annotations

import libcst as cst

from amprewrite.analysis.facts import CallSite, ModuleFacts, Statement
from amprewrite.analysis.forward import is_model_call
from amprewrite.analysis.kinds import Kind, KindTable
from amprewrite.analysis.names import dotted
from amprewrite.analysis.training_step import Note, Region, TrainingSteps
from amprewrite.analysis.tree import descendants
from amprewrite.catalog import SKIP, declare

FORWARD_LEFT_FP32 = declare(
    "AMP215", SKIP, "forward pass on the training path left in FP32",
    "A model runs outside every autocast region on the way to a scaled backward: in a helper "
    "that computes gradients of its own (an adversarial attack), in a function amprewrite "
    "cannot see into that is handed the model, or apart from the loss. It trains correctly, in "
    "float32; wrap it in `autocast()` if it should run in low precision too.",
    why="A model runs outside every autocast region on the way to a scaled backward.",
    example=(
        "x_adv = attack(model, x)   # the model runs in FP32 inside the attack\n"
        "loss = criterion(model(x_adv), y)"
    ),
)


def forwards_left_fp32(
    facts: ModuleFacts, kinds: KindTable, training: TrainingSteps, regions: list[Region],
    kept_in: list[cst.BaseExpression],
) -> list[Note]:
    """A note on each forward pass of the training path outside `regions` and the forwards
    `kept_in` autocast (written in a loss that leaves the region, `bce(model(x), y)`)."""
    if not training.found:
        return []
    covered = _covered(regions)
    autocast_calls = {id(node) for expression in kept_in for node in descendants(expression)}
    sites = [*training.backwards, *training.steps]
    functions = {site.function for site in sites} - {None}
    # at module level, the innermost loops running the training step
    loops = {id(loop) for site in sites if site.function is None
             and (loop := facts.enclosing_loop(site.statement)) is not None}
    training_path = [site for site in facts.calls if site.function in functions or (
        site.function is None and any(id(outer) in loops for outer in
                                      facts.enclosing_statements(site.statement)))]
    functions |= _called_outside(training_path, functions, covered, facts)
    notes = []
    for site in facts.calls:
        on_path = site.function in functions or (site.function is None and any(
            id(outer) in loops for outer in facts.enclosing_statements(site.statement)))
        if not on_path or _inside(site.statement, covered, facts) or (
                id(site.call) in autocast_calls):
            continue
        if is_model_call(site.call, kinds):
            if not _maintenance(site.call) and kinds.kind_of_value(site.call) is None:
                notes.append(Note(FORWARD_LEFT_FP32, site.call,
                                  f"`{facts.one_line(site.call.func)}(...)` runs outside "
                                  "autocast on the training path and stays FP32"))
        elif ((model := _model_handed_to(site, facts, kinds)) is not None
              and not _builds(site.call) and not _keeps(site.call)
              and kinds.kind_of_value(site.call) is None):
            # (not `prepare_model(model)` or `Trainer(model, ...)`: they wrap or build)
            notes.append(Note(FORWARD_LEFT_FP32, site.call,
                              f"`{facts.one_line(site.call.func)}(...)` is handed the model "
                              f"`{model}` outside autocast: its forward passes stay FP32"))
    return notes


def _builds(call: cst.Call) -> bool:
    """A class is instantiated (`Trainer(model, optimizer)`)."""
    name = dotted(call.func)
    return name is not None and name.rsplit(".", 1)[-1][:1].isupper()


def _maintenance(call: cst.Call) -> bool:
    """A model method that touches gradients, state, placement or sharding, not a forward
    pass (`model.clip_grad_norm_(1.0)` of FSDP, `model.load_state_dict(...)`,
    `model.to_empty(device=...)`, FSDP2's `model.unshard()`)."""
    method = call.func.attr.value if isinstance(call.func, cst.Attribute) else ""
    return method.startswith("set_") or any(part in method for part in _MAINTENANCE)


_MAINTENANCE = ("grad", "clip", "state", "buffer", "hook", "reset", "init", "shard", "empty",
                "register", "named_", "parameters", "modules", "children", "prefetch")
# Callees handed the model that keep or show it rather than run it.
_KEEPERS = ("save", "load", "checkpoint", "inspect", "print", "summary", "count", "clip",
            "grad_norm")


def _keeps(call: cst.Call) -> bool:
    """`checkpointer.save(model, optim)`, `inspect_model(model)`: by the callee's name."""
    name = (dotted(call.func) or "").rsplit(".", 1)[-1].lower()
    return any(part in name for part in _KEEPERS)


def _covered(regions: list[Region]) -> set[int]:
    """The statements the regions run under autocast, with the backward line whose inline loss
    (`netD(netG(z)).mean().backward()`) a region computes."""
    covered = {id(statement) for region in regions for statement in region.statements}
    return covered | {id(region.hoist.statement) for region in regions
                      if region.hoist is not None}


def _inside(statement: Statement, covered: set[int], facts: ModuleFacts) -> bool:
    return any(id(outer) in covered for outer in facts.enclosing_statements(statement))


def _called_outside(
    training_path: list[CallSite], functions: set[cst.FunctionDef | None], covered: set[int],
    facts: ModuleFacts,
) -> set[cst.FunctionDef | None]:
    """The module's functions that the training path calls outside every region (one level
    down: `x_adv = self.adversarial(x, y)` before the forward pass, `fgsm(model, x, y)`, or
    `attacker.perturb(x, y)` of an attack object built from a class of the file)."""
    by_name = {f.name.value: f for f in facts.functions if f not in facts.function_class}
    called: set[cst.FunctionDef | None] = set()
    for site in training_path:
        if _inside(site.statement, covered, facts):
            continue
        callee = _callee(site, by_name, facts)
        if callee is not None and callee not in functions:
            called.add(callee)
    return called


def _callee(
    site: CallSite, by_name: dict[str, cst.FunctionDef], facts: ModuleFacts
) -> cst.FunctionDef | None:
    """The file's function `site` calls: `f(...)`, `self.f(...)`, or `obj.f(...)` where every
    assignment of `obj` builds an instance of one of the file's classes."""
    name = dotted(site.call.func) or ""
    if name in by_name:
        return by_name[name]
    owner, _, method = name.rpartition(".")
    if not owner:
        return None
    if owner == "self" and site.function in facts.function_class:
        return facts.method(facts.function_class[site.function], method)
    classes = {cls.name.value: cls for cls in facts.classes}
    built = [b.value for b in facts.bindings if b.keys == (owner,)]
    kinds = {dotted(v.func) if isinstance(v, cst.Call) else None for v in built}
    if len(kinds) != 1 or (cls_name := kinds.pop()) not in classes:
        return None
    return facts.method(classes[cls_name], method)


def _model_handed_to(site: CallSite, facts: ModuleFacts, kinds: KindTable) -> str | None:
    """The model argument of a call into code this module does not hold, if any."""
    name = dotted(site.call.func) or ""
    local = {f.name.value for f in facts.functions}
    if name.removeprefix("self.") in local or (
            facts.imports.resolve(site.call.func) or "").startswith("torch."):
        return None
    for arg in site.call.args:
        if kinds.of_expr(arg.value) is Kind.MODEL:
            return facts.one_line(arg.value)
    return None
