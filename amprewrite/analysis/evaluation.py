"""Evaluation and inference forward passes: model calls under no_grad / inference_mode."""

from __future__ import annotations

import libcst as cst

from amprewrite.analysis.facts import CallSite, ModuleFacts, Statement
from amprewrite.analysis.kinds import Kind, KindTable
from amprewrite.analysis.names import dotted, receiver_key
from amprewrite.analysis.statements import calls_in
from amprewrite.analysis.training_step import Region, merge_regions

_NO_GRAD = frozenset({"torch.no_grad", "torch.inference_mode", "torch.set_grad_enabled"})
# Module methods that are not a forward pass.
_NOT_FORWARD = frozenset({
    "parameters", "named_parameters", "buffers", "named_buffers", "modules", "named_modules",
    "children", "named_children", "state_dict", "load_state_dict", "train", "eval", "to", "cuda",
    "cpu", "half", "float", "double", "bfloat16", "zero_grad", "apply", "register_forward_hook",
    "register_buffer", "requires_grad_", "add_module", "get_submodule", "extra_repr", "type",
})


def analyse_evaluation(
    facts: ModuleFacts, kinds: KindTable, training_regions: list[Region]
) -> list[Region]:
    """Regions covering each evaluation forward pass and the loss computed from it."""
    candidates: dict[int, tuple[cst.IndentedBlock | cst.Module, set[int]]] = {}
    for site in facts.calls:
        if not _is_model_call(site, kinds) or not _under_no_grad(site, facts):
            continue
        info = facts.statements.get(site.statement)
        if info is None:
            continue
        block, positions = candidates.setdefault(id(info.block), (info.block, set()))
        positions.add(info.index)
    regions = []
    for block, positions in candidates.values():
        start, end = min(positions), max(positions)
        while end + 1 < len(block.body) and _computes_loss(block.body[end + 1], facts, kinds):
            end += 1
        regions.append(Region(block, start, end))
    merged = merge_regions(regions, facts)
    return [r for r in merged if not _inside(r, training_regions, facts)]


def _is_model_call(site: CallSite, kinds: KindTable) -> bool:
    func = site.call.func
    if kinds.of_expr(func) is Kind.MODEL:
        return True
    return (
        isinstance(func, cst.Attribute)
        and func.attr.value not in _NOT_FORWARD
        and kinds.of_expr(func.value) is Kind.MODEL
    )


def _under_no_grad(site: CallSite, facts: ModuleFacts) -> bool:
    for outer in facts.enclosing_statements(site.statement):
        if isinstance(outer, cst.With) and any(
            _is_no_grad(item.item, facts) for item in outer.items
        ):
            return True
        if isinstance(outer, cst.FunctionDef):
            return any(_is_no_grad(d.decorator, facts) for d in outer.decorators)
    return False


def _is_no_grad(node: cst.BaseExpression, facts: ModuleFacts) -> bool:
    call = node if isinstance(node, cst.Call) else None
    target = call.func if call is not None else node
    name = facts.imports.resolve(target) or dotted(target) or ""
    if name not in _NO_GRAD and name.rsplit(".", 1)[-1] not in {"no_grad", "inference_mode"}:
        return False
    if name.endswith("set_grad_enabled"):
        return call is not None and bool(call.args) and dotted(call.args[0].value) == "False"
    return True


def _computes_loss(statement: Statement, facts: ModuleFacts, kinds: KindTable) -> bool:
    for call in calls_in(statement):
        if kinds.of_expr(call.func) is Kind.CRITERION:
            return True
        name = (facts.imports.resolve(call.func) or receiver_key(call.func) or "").lower()
        last = name.rsplit(".", 1)[-1]
        if "loss" in last or "criterion" in last or "entropy" in last or last == "kl_div":
            return True
    return False


def _inside(region: Region, others: list[Region], facts: ModuleFacts) -> bool:
    ancestors = facts.enclosing_statements(region.block.body[region.start])[1:]
    covered = {id(s) for other in others for s in other.statements}
    return any(id(a) in covered for a in ancestors)
