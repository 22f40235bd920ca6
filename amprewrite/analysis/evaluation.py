"""Evaluation and inference forward passes: model calls under no_grad / inference_mode, and
every call outside training of a model that keeps state between calls."""

from __future__ import annotations

import libcst as cst

from amprewrite.analysis.facts import Block, CallSite, ModuleFacts, Statement, body
from amprewrite.analysis.forward import computes_loss, is_model_call
from amprewrite.analysis.kinds import KindTable
from amprewrite.analysis.names import dotted
from amprewrite.analysis.training_step import Region, merge_regions

_NO_GRAD = frozenset({"torch.no_grad", "torch.inference_mode", "torch.set_grad_enabled"})


def analyse_evaluation(
    facts: ModuleFacts,
    kinds: KindTable,
    training_regions: list[Region],
    eval_functions: frozenset[cst.FunctionDef] = frozenset(),
) -> list[Region]:
    """Regions covering each evaluation forward pass and the loss computed from it: model
    calls under no_grad/inference_mode, or anywhere in `eval_functions` (a framework's
    evaluation hooks, which it runs without gradients)."""
    candidates: dict[int, tuple[cst.IndentedBlock | cst.Module, set[int]]] = {}
    stateful = stateful_models(facts)
    in_training = {id(s) for region in training_regions for s in region.statements}
    regions = []
    for site in facts.calls:
        if not is_model_call(site.call, kinds):
            continue
        info = facts.statements.get(site.statement)
        if info is None:
            continue
        if site.function in eval_functions or under_no_grad(site, facts):
            block, positions = candidates.setdefault(id(info.block), (info.block, set()))
            positions.add(info.index)
        elif dotted(site.call.func) in stateful and not any(
                id(s) in in_training for s in facts.enclosing_statements(site.statement)):
            end = _loss_end(info.block, info.index, facts, kinds)
            regions.append(Region(info.block, info.index, end))  # this call alone
    for block, positions in candidates.values():
        start, end = min(positions), max(positions)
        regions.append(Region(block, start, _loss_end(block, end, facts, kinds)))
    merged = merge_regions(regions, facts)
    return [r for r in merged if not _inside(r, training_regions, facts)]


def stateful_models(facts: ModuleFacts) -> set[str]:
    """Keys bound to instances of the file's nn.Module classes whose forward keeps a tensor on
    the module (`lstm_out, self.hidden = self.lstm(x, self.hidden)`). A training forward under
    autocast leaves that state in low precision, so every other call of the model needs
    autocast too: an LSTM given a float32 input and a bfloat16 state raises."""
    classes = set()
    for function, cls in facts.function_class.items():
        if function.name.value == "forward" and any(
            key.startswith("self.") for b in facts.bindings if b.function is function
            for key in b.keys
        ):
            classes.add(cls.name.value)
    return {key for b in facts.bindings if isinstance(b.value, cst.Call)
            and dotted(b.value.func) in classes for key in b.keys}


_LOOKAHEAD = 3  # simple statements a loss may follow the forward pass by (`n = out.shape[0]`)


def _loss_end(block: Block, end: int, facts: ModuleFacts, kinds: KindTable) -> int:
    """The last statement computing a loss shortly after the forward pass (or `end`), so the
    loss is not computed, or summed, in low precision outside the region."""
    last = end
    for position in range(end + 1, min(end + 1 + _LOOKAHEAD, len(block.body))):
        statement = block.body[position]
        if not isinstance(statement, cst.SimpleStatementLine):
            break
        if computes_loss(statement, facts, kinds):
            last = position
    return last


def under_no_grad(site: CallSite, facts: ModuleFacts) -> bool:
    return statement_under_no_grad(site.statement, facts)


def statement_under_no_grad(statement: Statement, facts: ModuleFacts) -> bool:
    """`statement` runs without gradients: in a `no_grad` / `inference_mode` block, or in a
    function they decorate."""
    for outer in facts.enclosing_statements(statement):
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


def _inside(region: Region, others: list[Region], facts: ModuleFacts) -> bool:
    ancestors = facts.enclosing_statements(body(region.block)[region.start])[1:]
    covered = {id(s) for other in others for s in other.statements}
    return any(id(a) in covered for a in ancestors)
