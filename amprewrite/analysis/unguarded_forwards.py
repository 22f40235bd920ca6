"""Forward passes outside the training step and not under `no_grad`: each gets a finding.

An evaluation loop is found by its `torch.no_grad()` (or `inference_mode`), and then wrapped in
autocast. Without one, a model call outside every region may be evaluation, or may feed
gradients the analysis cannot see (a teacher's logits, a target network): amprewrite cannot
tell, so it leaves the call in FP32 and says so where it is, rather than nothing.
"""

from __future__ import annotations

import libcst as cst

from amprewrite.analysis.evaluation import under_no_grad
from amprewrite.analysis.facts import CallSite, ModuleFacts
from amprewrite.analysis.kinds import Kind, KindTable
from amprewrite.analysis.names import dotted
from amprewrite.analysis.statements import is_backward_call
from amprewrite.analysis.summaries import summaries_of
from amprewrite.analysis.training_step import Note, Region
from amprewrite.catalog import SKIP, declare

FORWARD_WITHOUT_NO_GRAD = declare(
    "AMP217", SKIP, "forward pass outside training, without `no_grad`, left in FP32",
    "If it is evaluation, run it under `with torch.no_grad():` (also faster, and it keeps no "
    "graph) and run amprewrite again: it then wraps it in autocast as other evaluation loops. "
    "If its outputs feed a loss, wrap it in `autocast()` by hand, or leave it in FP32.",
    why=("A model runs outside every autocast region and not under `torch.no_grad()` or "
         "`torch.inference_mode()`, so amprewrite cannot tell evaluation from a forward pass "
         "whose gradients matter."),
    example=(
        "model.eval()\n"
        "for x, y in val_loader:\n"
        "    out = model(x)   # AMP217: left in FP32; wrap the loop in torch.no_grad()"
    ),
)


def forwards_without_no_grad(
    facts: ModuleFacts, kinds: KindTable, regions: list[Region], reported: set[int]
) -> list[Note]:
    """A note for each call of a model (`model(x)`, not its methods) outside `regions`, not
    under no_grad or autocast, not in a model's own methods, not in a loop (or function) that
    computes gradients, and not already `reported` (by node id)."""
    covered = {id(statement) for region in regions for statement in region.statements}
    models = {cls for function, cls in facts.function_class.items()
              if function.name.value == "forward"}
    models |= set(kinds.model_classes())  # an nn.Module without `forward` (cleanrl's Agent)
    computing_gradients = {id(outer) for site in facts.calls if _computes_gradients(site, facts)
                           for outer in facts.enclosing_statements(site.statement)}
    inside = _called_only_under_autocast(facts, kinds, covered)
    notes = []
    for site in facts.calls:
        if (kinds.of_expr(site.call.func) is not Kind.MODEL or id(site.call) in reported
                or (site.function is not None and facts.function_class.get(site.function)
                    in models)
                or site.function in inside or _guarded(site, covered, facts)):
            continue
        scope = _scope(site, facts)
        if scope is not None and id(scope) in computing_gradients:
            continue  # a forward pass next to a backward: on a training path the rules report
        notes.append(Note(FORWARD_WITHOUT_NO_GRAD, site.call,
                          f"`{facts.one_line(site.call.func)}(...)` runs outside the training "
                          "step and not under `torch.no_grad()`: left in FP32, as it may need "
                          "gradients (under `no_grad`, evaluation is wrapped in autocast)"))
    return notes


def _called_only_under_autocast(
    facts: ModuleFacts, kinds: KindTable, covered: set[int]
) -> set[cst.FunctionDef]:
    """The file's functions that run only under a region's autocast: every call of them is
    inside a region, or in such a function (`def critic(x): return netD(x).mean()` called
    as `d_real = critic(real)` in the training step's region)."""
    calls: dict[cst.FunctionDef, list[CallSite]] = {}
    for site, callee in summaries_of(facts, kinds).local_calls:
        calls.setdefault(callee, []).append(site)
    inside: set[cst.FunctionDef] = set()
    while True:
        more = {callee for callee, sites in calls.items() if callee not in inside and all(
            site.function in inside or _under_autocast(site, covered, facts)
            for site in sites)}
        if not more:
            return inside
        inside |= more


def _computes_gradients(site: CallSite, facts: ModuleFacts) -> bool:
    """`.backward()`, `torch.autograd.grad(...)` or `torch.autograd.backward(...)`."""
    name = facts.imports.resolve(site.call.func) or ""
    return is_backward_call(site.call) or name in ("torch.autograd.grad",
                                                   "torch.autograd.backward")


def _scope(site: CallSite, facts: ModuleFacts) -> cst.CSTNode | None:
    """The innermost loop around the call, else its function, else None (the module)."""
    for outer in facts.enclosing_statements(site.statement)[1:]:
        if isinstance(outer, cst.For | cst.While | cst.FunctionDef):
            return outer
    return None


def _guarded(site: CallSite, covered: set[int], facts: ModuleFacts) -> bool:
    """Inside a region, under no_grad, or under an autocast the file already has."""
    return under_no_grad(site, facts) or _under_autocast(site, covered, facts)


def _under_autocast(site: CallSite, covered: set[int], facts: ModuleFacts) -> bool:
    """Inside a region, or under an autocast the file already has."""
    for outer in facts.enclosing_statements(site.statement):
        if id(outer) in covered:
            return True
        if isinstance(outer, cst.With) and any(
                (dotted(item.item.func if isinstance(item.item, cst.Call) else item.item)
                 or "").endswith("autocast") for item in outer.items):
            return True
    return False
