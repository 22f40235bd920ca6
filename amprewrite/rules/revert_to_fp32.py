"""O0 on a script that trains in mixed precision: take it out again (plain FP32).

On a script amprewrite rewrote, what amprewrite wrote goes (the author's own autocasts stay).
The loss variable a rewrite hoisted out of `.backward()` and the `.float()` added around an
unsafe loss stay: both are correct FP32 code. On mixed precision the author wrote, all of it
goes, or none: the revert is tried on the module's text, and refused where it would leave the
script broken (`consistency.py`), or where the mixed precision runs in a test.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis.amp_usage import AmpUsage
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, SKIP, declare
from amprewrite.findings import ALREADY_MIXED_PRECISION, Finding
from amprewrite.line_map import line_map
from amprewrite.options import Options
from amprewrite.rules.authors_amp import drop_unused_amp_imports, test_running_amp
from amprewrite.rules.consistency import new_problems
from amprewrite.rules.context import RuleContext
from amprewrite.rules.edits import (
    as_receiver,
    importing_only,
    remove,
    unwrap,
    without,
    without_parameter,
)
from amprewrite.rules.registry import Example, rule
from amprewrite.transform import Plan, Replace, apply_edits

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis

MIXED_PRECISION_REMOVED = declare(
    "AMP170", CHANGE, "mixed precision removed (O0)",
    "O0 on a script amprewrite rewrote takes autocast, the scaler and its checkpoint entries out "
    "again: plain FP32 training. Only those: the author's statements on a line shared with "
    "them stay, and so do `autocast(enabled=False)` guards (amprewrite never writes one).",
    why=(
        "`--opt-level O0` runs on a script amprewrite rewrote, or on one whose own mixed "
        "precision can be taken out whole."
    ),
)

REVERT_WOULD_BREAK = declare(
    "AMP425", SKIP, "mixed precision kept at O0: taking it out would break the script",
    "O0 takes a script's own mixed precision out only where all of it goes together: every "
    "use of the scaler, its creation, its import, its state saved and restored, in every "
    "function and class of the file. Here something would be left behind (a name no longer "
    "defined, a method called on None, a state restored but no longer saved, the scaler still "
    "used), so the file is left as written. Turn AMP off where the script offers it (its "
    "flag, `enabled=False`), or take the rest out by hand.",
    why=(
        "`--opt-level O0` on mixed precision that cannot be taken out whole: the message "
        "names what would be left broken."
    ),
    example=(
        "def main():\n"
        "    scaler = torch.amp.GradScaler()\n"
        "    train(loader, model, optimizer, scaler)   # O0 would leave `scaler` undefined here"
    ),
)

TEST_PRECISION_KEPT = declare(
    "AMP426", SKIP, "mixed precision in a test kept at O0",
    "A test that runs autocast or a grad scaler (a `test_*` function, a method of a `Test*` "
    "class or a `unittest.TestCase`) checks mixed precision on purpose: O0 leaves the file as "
    "written.",
    why="`--opt-level O0` on a file whose mixed precision runs in a test.",
    example=(
        "def test_bfloat16_step():\n"
        "    with torch.autocast(\"cpu\", dtype=torch.bfloat16):   # kept\n"
        "        loss = model(x).sum()"
    ),
)

AUTHORS_AUTOCAST_KEPT = declare(
    "AMP427", SKIP, "the script's own autocast kept at O0",
    "O0 on a script amprewrite rewrote takes out what amprewrite added (its runtime's "
    "`autocast()`, or the plain style's `torch.autocast(amp_device)`); an autocast the author "
    "wrote (one the rewrite kept, such as an evaluation's) stays as written.",
    why="`--opt-level O0` on a rewritten script that also holds an autocast of its own.",
    example=(
        "with torch.no_grad(), torch.autocast(\"cuda\"):   # the author's: kept\n"
        "    val_out = model(xv)"
    ),
)


def revert_to_fp32(ctx: RuleContext, usage: AmpUsage) -> None:
    for statement in [*usage.imports, *usage.statements]:
        ctx.plan.replaces.append(Replace(statement, remove))
    for line, removed in _parts_by_line(usage).items():
        ctx.plan.replaces.append(Replace(line, _without_parts(line, removed)))
    for line, names in usage.narrowed:
        ctx.plan.replaces.append(Replace(line, importing_only(names)))
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
    usage = analysis.amp_usage
    if not usage:
        ctx.file_findings.append(Finding(
            ALREADY_MIXED_PRECISION, 1, 1, f"file uses mixed precision (`{analysis.existing_amp}`) "
            "that amprewrite did not write; left unchanged"))
        return
    test = None if usage.rewritten else test_running_amp(ctx.facts, usage)
    if test is not None:
        ctx.notes.append(Note(TEST_PRECISION_KEPT, test.name,
                              f"`{test.name.value}` is a test: its mixed precision is "
                              "deliberate; the file is left as written at O0"))
        return
    start = len(ctx.plan.replaces)
    revert_to_fp32(ctx, usage)
    reverted = _trial(ctx, start)
    if not usage.rewritten:
        drop_unused_amp_imports(ctx, ast.parse(reverted))
        reverted = _trial(ctx, start)
    problem = next(iter(new_problems(ctx.facts.code, reverted, usage.scalers,
                                     whole=not usage.rewritten)), None)
    if problem is not None:
        del ctx.plan.replaces[start:]
        whose = "amprewrite's" if usage.rewritten else "the script's own"
        line = line_map(reverted, ctx.facts.code)(problem.line)
        ctx.file_findings.append(Finding(
            REVERT_WOULD_BREAK, line, problem.col,
            f"O0 cannot take {whose} mixed precision out whole: after it, {problem.message} "
            "here; file left unchanged"))
        return
    ctx.notes.extend(Note(AUTHORS_AUTOCAST_KEPT, statement.items[0].item,
                          f"`{ctx.facts.one_line(statement.items[0].item)}` is the script's own "
                          "autocast, not amprewrite's: kept at O0")
                     for statement in usage.kept_autocasts)
    what = ("mixed precision removed" if usage.rewritten
            else "the script's own mixed precision removed, all of it")
    ctx.notes.append(Note(MIXED_PRECISION_REMOVED, ctx.facts.module.body[0],
                          f"{what}: the script is plain FP32 again (O0)"))


def _trial(ctx: RuleContext, start: int) -> str:
    """The module's text with the revert's edits (from `start` on) carried out."""
    plan = Plan(replaces=ctx.plan.replaces[start:])
    return apply_edits(ctx.facts.module, plan, ctx.facts.statements_around).code


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


RULE = rule("revert-to-fp32", (MIXED_PRECISION_REMOVED, ALREADY_MIXED_PRECISION, REVERT_WOULD_BREAK,
                               TEST_PRECISION_KEPT, AUTHORS_AUTOCAST_KEPT), _plan,
            examples=_REVERT_TO_FP32_EXAMPLES)
