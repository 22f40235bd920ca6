"""O0 on a script amprewrite rewrote: take the mixed precision out again (plain FP32).

The loss variable a rewrite hoisted out of `.backward()` and the `.float()` added around an
unsafe loss stay: both are correct FP32 code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis.amp_usage import AmpUsage
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, declare
from amprewrite.findings import ALREADY_MIXED_PRECISION, Finding
from amprewrite.options import Options
from amprewrite.rules.context import RuleContext
from amprewrite.rules.edits import as_receiver, remove, unwrap, without, without_parameter
from amprewrite.rules.registry import Example, rule
from amprewrite.transform import Replace

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis

MIXED_PRECISION_REMOVED = declare(
    "AMP170", CHANGE, "mixed precision removed (O0)",
    "O0 on a script amprewrite rewrote takes autocast, the scaler and its checkpoint entries out "
    "again: plain FP32 training. Only those: the author's statements on a line shared with "
    "them stay, and so do `autocast(enabled=False)` guards (amprewrite never writes one).",
    why="`--opt-level O0` runs on a script amprewrite rewrote.",
)


def revert_to_fp32(ctx: RuleContext, usage: AmpUsage) -> None:
    for statement in [*usage.imports, *usage.statements]:
        ctx.plan.replaces.append(Replace(statement, remove))
    for line, removed in _parts_by_line(usage).items():
        ctx.plan.replaces.append(Replace(line, _without_parts(line, removed)))
    for line, names in usage.narrowed:
        ctx.plan.replaces.append(Replace(line, _importing_only(names)))
    for block in usage.unwrap:
        ctx.plan.replaces.append(Replace(block, unwrap))
    for call in usage.calls:
        ctx.plan.replaces.append(Replace(call, _plain_call))
    for call in [*usage.scaled_arguments, *usage.float32_casts]:
        ctx.plan.replaces.append(Replace(call, lambda node: node.args[0].value))
    for call, keyword in usage.removed_keywords:
        ctx.plan.replaces.append(Replace(call, without(call, keyword)))
    for container, entry in usage.entries:
        ctx.plan.replaces.append(Replace(container, without(container, entry)))
    for decorator in usage.decorators:
        ctx.plan.replaces.append(Replace(decorator, remove))
    for function, name in usage.parameters:
        ctx.plan.replaces.append(Replace(function.params, without_parameter(name)))
    for call_id, code in usage.master_params.items():
        parameters = ctx.parse_expression(code)
        ctx.plan.replaces.append(Replace(_call_by_id(ctx, call_id), lambda _, p=parameters: p))
    _no_blank_lines_on_top(ctx, usage)
    ctx.notes.append(Note(MIXED_PRECISION_REMOVED, ctx.facts.module.body[0],
                          "mixed precision removed: the script is plain FP32 again (O0)"))



def _no_blank_lines_on_top(ctx: RuleContext, usage: AmpUsage) -> None:
    """A file whose only imports were amprewrite's starts again at its first definition, not
    at the blank lines that separated it from them."""
    body = ctx.facts.module.body
    removed = {id(s) for s in [*usage.imports, *usage.statements]}
    first = next((s for s in body if id(s) not in removed), None)
    if first is not None and first is not body[0] and isinstance(
            first, cst.FunctionDef | cst.ClassDef) and first.leading_lines and all(
            line.comment is None for line in first.leading_lines):
        ctx.plan.replaces.append(Replace(first, lambda node: node.with_changes(leading_lines=[])))


def _parts_by_line(usage: AmpUsage) -> dict[cst.SimpleStatementLine, set[int]]:
    by_line: dict[cst.SimpleStatementLine, set[int]] = {}
    for line, part in usage.parts:
        by_line.setdefault(line, set()).add(id(part))
    return by_line


def _without_parts(
    line: cst.SimpleStatementLine, removed: set[int]
) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """A builder keeping the author's parts of `line` (by their position in it), and taking
    out the parts whose ids are `removed`."""
    kept = [index for index, part in enumerate(line.body) if id(part) not in removed]

    def build(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.SimpleStatementLine)
        body = [node.body[index] for index in kept]
        body[-1] = body[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        return node.with_changes(body=body)

    return build


def _importing_only(names: frozenset[str]) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """`from amprewrite_runtime import GradScaler, autocast` -> `... import autocast`."""

    def build(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.SimpleStatementLine)
        body = []
        for small in node.body:
            assert isinstance(small, cst.ImportFrom) and isinstance(small.names, Sequence)
            aliases = [a for a in small.names
                       if (a.evaluated_alias or a.evaluated_name) in names]
            if aliases:
                aliases[-1] = aliases[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                body.append(small.with_changes(names=aliases))
        body[-1] = body[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        return node.with_changes(body=body)

    return build


def _plain_call(node: cst.CSTNode) -> cst.CSTNode:
    """`scaler.step(opt)` -> `opt.step()`; `scaler.scale(x).backward()` -> `x.backward()`."""
    assert isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
    if node.func.attr.value == "step":
        optimizer = node.args[0].value
        return node.with_changes(func=cst.Attribute(optimizer, cst.Name("step")), args=[])
    scaled = node.func.value
    assert isinstance(scaled, cst.Call)
    loss = scaled.args[0].value
    loss = as_receiver(loss)
    return node.with_changes(func=node.func.with_changes(value=loss))


def _call_by_id(ctx: RuleContext, call_id: int) -> cst.Call:
    return next(site.call for site in ctx.facts.calls if id(site.call) == call_id)


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    if analysis.amp_usage:
        revert_to_fp32(ctx, analysis.amp_usage)
    else:
        ctx.file_findings.append(Finding(
            ALREADY_MIXED_PRECISION, 1, 1, f"file uses mixed precision (`{analysis.existing_amp}`) "
            "that amprewrite did not write; left unchanged"))


_REVERT_TO_FP32_EXAMPLES = (
    Example(
        before="""\
import torch
from amprewrite_runtime import GradScaler, autocast

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = GradScaler()
for x, y in loader:
    optimizer.zero_grad()
    with autocast():
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        after="""\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
""",
        codes=(MIXED_PRECISION_REMOVED,), options=Options(opt_level="O0"),
    ),
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
""",
        after=None,
        codes=(), options=Options(opt_level="O0"),
    ),
)


RULE = rule("revert-to-fp32", (MIXED_PRECISION_REMOVED, ALREADY_MIXED_PRECISION), _plan,
            examples=_REVERT_TO_FP32_EXAMPLES)
