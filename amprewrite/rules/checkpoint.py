"""Save the scaler's state wherever the optimizer's is saved, and restore it likewise."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis.checkpoints import Checkpoints, KeywordRestore, SavedState
from amprewrite.analysis.facts import Statement
from amprewrite.analysis.names import dotted, iter_keys
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, SKIP, declare
from amprewrite.rules.context import RuleContext
from amprewrite.rules.edits import (
    append_in_layout,
    continued_at,
    first_line_column,
    insert_after,
    keyword,
    one_per_line,
    too_long,
)
from amprewrite.rules.registry import Example, rule
from amprewrite.transform import Insert, Replace

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis


SCALER_STATE_SAVED = declare(
    "AMP120", CHANGE, "scaler state saved in the checkpoint",
    "Every dict carrying an optimizer's state that reaches `torch.save` or a save helper also "
    "carries the scaler's.",
    why=(
        "A checkpoint dict that carries an optimizer's state reaches `torch.save` or a "
        "save helper."
    ),
)

SCALER_STATE_RESTORED = declare(
    "AMP121", CHANGE, "scaler state restored from the checkpoint",
    "Restored only when the checkpoint has it, so checkpoints written before the rewrite still "
    "load.",
    why="A checkpoint's optimizer state is restored, so the scaler's must be too.",
)


OPTIMIZER_SAVED_ALONE = declare(
    "AMP122", SKIP, "optimizer state saved on its own, without the scaler's",
    "`torch.save(optimizer.state_dict(), path)` writes a file per state, not a checkpoint "
    "dict: save `scaler.state_dict()` the same way next to it and load it where the "
    "optimizer's is loaded (when the file exists), or a resumed float16 run starts again from "
    "the initial scale.",
    why=(
        "`torch.save(optimizer.state_dict(), path)` saves the optimizer's state in a "
        "file of its own, where no scaler entry can be added."
    ),
    example=(
        "torch.save(optimizer.state_dict(), \"opt.pt\")\n"
        "# add: torch.save(scaler.state_dict(), \"scaler.pt\")"
    ),
)


SCALER_NOT_NAMED = declare(
    "AMP126", SKIP, "optimizer state saved without the grad scaler's",
    "The scaler's state cannot be added here: the training step is in another file (a "
    "callback or helper saves `trainer.optimizer`'s state), or the optimizer states sit in a "
    "list or comprehension. Save the scaler's state next to them (e.g. "
    "`trainer.scaler.state_dict()` when the object holding the optimizer holds the scaler) "
    "and restore it with them, or a resumed float16 run starts again from the initial scale.",
    why=(
        "An optimizer's state is saved where the scaler cannot be reached: the training "
        "step is in another file, or the states sit in a list or comprehension."
    ),
    example=(
        "# callbacks.py\n"
        "torch.save({\"optimizer\": trainer.optimizer.state_dict()}, path)\n"
        "# add \"scaler\": trainer.scaler.state_dict()"
    ),
)


SCALER_NOT_RESTORED = declare(
    "AMP227", SKIP, "optimizer state restored without the grad scaler's",
    "The optimizer's state is restored where the scaler's restore cannot be added: from an "
    "expression (`optimizer.load_state_dict(torch.load(path))`), by a helper amprewrite does "
    "not see into (`utils.restart_from_checkpoint(path, optimizer=optimizer)`), by one that "
    "would fail on a checkpoint without the scaler's state, or in a file where no scaler can "
    "be named. Restore `scaler.load_state_dict(...)` there too, when the checkpoint has it, or "
    "a resumed float16 run starts again from the initial scale.",
    why=("An optimizer's state is restored where the rewrite cannot add the scaler's restore "
         "beside it."),
    example=(
        "optimizer.load_state_dict(torch.load(\"opt.pt\"))\n"
        "# add: scaler.load_state_dict(torch.load(\"scaler.pt\")) where that file exists"
    ),
)


def unnamed_scaler_saves(ctx: RuleContext, checkpoints: Checkpoints) -> None:
    """A file with no scaler of its own that saves or restores an optimizer's state: say so
    there."""
    for node in [*(state.entry for state in checkpoints.saved),
                 *(site.call for site in checkpoints.alone), *checkpoints.unpaired]:
        ctx.notes.append(Note(SCALER_NOT_NAMED, node, "the optimizer's state is saved here, "
                              "but no grad scaler can be named in this file: save the scaler's "
                              "state next to it (the training step is elsewhere)"))
    restores: list[cst.CSTNode] = [
        *(r.site.call for r in checkpoints.restored), *(r.statement for r in checkpoints.assigned),
        *(r.site.call for r in checkpoints.by_keyword), *(n for n, _ in checkpoints.unrestored)]
    for node in restores:
        ctx.notes.append(Note(SCALER_NOT_RESTORED, node, "the optimizer's state is restored "
                              "here, but no grad scaler can be named in this file: restore the "
                              "scaler's state next to it (the training step is elsewhere)"))


def checkpoint_scaler(
    ctx: RuleContext, checkpoints: Checkpoints, passed: frozenset[int] = frozenset()
) -> None:
    """The scaler's state beside the optimizer's, saved and restored; `passed`: the calls
    (by id) a project passes the scaler to, which restore it themselves."""
    for call in checkpoints.unpaired:
        ctx.notes.append(Note(SCALER_NOT_NAMED, call, "the optimizer's state is saved inside "
                              f"a container no scaler entry can join: save "
                              f"`{ctx.scaler_expr}.state_dict()` in this checkpoint by hand"))
    for site in checkpoints.alone:
        ctx.notes.append(Note(OPTIMIZER_SAVED_ALONE, site.call, "the optimizer's state is saved "
                              f"on its own: save `{ctx.scaler_expr}.state_dict()` next to it "
                              "and restore it where the optimizer's is restored"))
    last_entry: dict[int, SavedState] = {}
    for state in checkpoints.saved:  # one scaler entry per dict: after its last optimizer entry
        key = id(state.container) if state.container is not None else id(state.entry)
        last_entry[key] = state
    for state in last_entry.values():
        if state.container is None:
            _save_by_statement(ctx, state, checkpoints.key)
        else:
            _save_in_container(ctx, state, checkpoints.key)
        ctx.notes.append(Note(SCALER_STATE_SAVED, state.entry, f"scaler state saved under "
                              f"\"{checkpoints.key}\" next to the optimizer's"))
    for restored in checkpoints.restored:
        subscript = restored.site.call.args[0].value
        assert isinstance(subscript, cst.Subscript)
        quote = _subscript_quote(subscript)
        key = f"{quote}{checkpoints.key}{quote}"
        statement = _after_optimizer_loop(ctx, restored.site.statement, restored.optimizer)
        _restore_after(ctx, statement, restored.checkpoint, key)
    for assigned in checkpoints.assigned:
        quote = _subscript_quote(assigned.subscript)
        _restore_after(ctx, assigned.statement, assigned.checkpoint,
                       f"{quote}{checkpoints.key}{quote}")
    for by_keyword in checkpoints.by_keyword:
        _restore_by_keyword(ctx, by_keyword, checkpoints.key)
    for node, what in checkpoints.unrestored:
        if id(node) not in passed:
            ctx.notes.append(Note(SCALER_NOT_RESTORED, node, f"{what}: restore "
                                  f"`{ctx.scaler_expr}`'s state there too, when the checkpoint "
                                  "has it"))


def _after_optimizer_loop(
    ctx: RuleContext, statement: Statement, optimizer: str | None
) -> Statement:
    """The loop over optimizers whose body `statement` is in, saving or restoring each one's
    state (`for name, optimizer in self.optimizers.items():`): the scaler's state is saved or
    restored once, after it. Else `statement`."""
    parent = ctx.facts.statements[statement].parent
    if (isinstance(parent, cst.For) and optimizer is not None
            and optimizer in iter_keys(parent.target)):
        return parent
    return statement


def _restore_by_keyword(ctx: RuleContext, restore: KeywordRestore, key: str) -> None:
    """`restart_from_checkpoint(path, optimizer=optimizer, scaler=scaler)`: the helper loads
    every keyword it is given whose key the checkpoint has."""
    call = restore.site.call
    name = ctx.facts.one_line(call.func)
    if any(arg.keyword is not None and arg.keyword.value == key for arg in call.args):
        return
    if not restore.guarded:
        ctx.notes.append(Note(SCALER_NOT_RESTORED, call, f"`{name}(...)` restores every state it "
                              "is given, also where the checkpoint lacks it: passing "
                              f"`{key}={ctx.scaler_expr}` would fail on checkpoints written "
                              "before the rewrite; restore the scaler's state when the "
                              "checkpoint has it"))
        return
    new = keyword(key, ctx.parse_expression(ctx.scaler_expr or ""))
    ctx.plan.replaces.append(Replace(call, append_in_layout(call, [new], ctx.facts,
                                                            ctx.line_limit)))
    ctx.notes.append(Note(SCALER_STATE_RESTORED, call, f"scaler state restored by `{name}(...)` "
                          f"with the others it is given (`{key}={ctx.scaler_expr}`), when the "
                          "checkpoint has one"))


def _save_in_container(ctx: RuleContext, state: SavedState, key: str) -> None:
    container, anchor = state.container, state.entry
    value = ctx.parse_expression(f"{ctx.scaler_expr}.state_dict()")
    if isinstance(container, cst.Dict):
        assert isinstance(anchor, cst.DictElement)
        quote = _quote_of(anchor.key)
        new: cst.DictElement | cst.Arg = anchor.with_changes(
            key=cst.SimpleString(f"{quote}{key}{quote}"), value=value)
    else:
        assert isinstance(anchor, cst.Arg)
        new = anchor.with_changes(keyword=cst.Name(key), value=value)
    build = insert_after(container, anchor, new)
    if too_long(ctx.facts, container, [new], ctx.line_limit):
        column = first_line_column(ctx.facts, container)
        build = one_per_line(build, ctx.facts.module.default_indent) if column is None else (
            continued_at(build, column))
    ctx.plan.replaces.append(Replace(container, build))


def _save_by_statement(ctx: RuleContext, state: SavedState, key: str) -> None:
    statement = state.entry
    assert isinstance(statement, cst.SimpleStatementLine)
    assign = statement.body[0]
    assert isinstance(assign, cst.Assign)
    target = assign.targets[0].target
    assert isinstance(target, cst.Subscript)
    base = ctx.facts.module.code_for_node(target.value)
    quote = _subscript_quote(target)
    line = ctx.parse_statement(f"{base}[{quote}{key}{quote}] = {ctx.scaler_expr}.state_dict()")
    saved = assign.value.func.value if isinstance(assign.value, cst.Call) and isinstance(
        assign.value.func, cst.Attribute) else assign.value
    block, index = ctx.facts.position(_after_optimizer_loop(ctx, statement, dotted(saved)))
    ctx.plan.inserts.append(Insert(block, index + 1, [line]))


def _restore_after(
    ctx: RuleContext, statement: cst.CSTNode, checkpoint: cst.BaseExpression, key: str
) -> None:
    name = ctx.facts.module.code_for_node(checkpoint)
    indent = ctx.facts.module.default_indent
    code = (f"if {key} in {name}:\n"
            f"{indent}{ctx.scaler_expr}.load_state_dict({name}[{key}])\n")
    restore = cst.parse_statement(code, config=ctx.facts.module.config_for_parsing)
    block, index = ctx.facts.position(statement)  # type: ignore[arg-type]
    ctx.plan.inserts.append(Insert(block, index + 1, [restore]))
    ctx.notes.append(Note(SCALER_STATE_RESTORED, statement,
                          f"scaler state restored from `{name}` when it "
                          "has one (checkpoints written before the rewrite have none)"))


def _subscript_quote(subscript: cst.Subscript) -> str:
    index = subscript.slice[0].slice
    return _quote_of(index.value) if isinstance(index, cst.Index) else '"'


def _quote_of(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.SimpleString) and node.quote in ("'", '"'):
        return node.quote
    return '"'


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    if ctx.scaler_expr is not None:
        links = analysis.links
        passed = frozenset(id(p.site.call) for p in links.passes) if links else frozenset()
        checkpoint_scaler(ctx, analysis.checkpoints, passed)
    elif not (analysis.training.found or analysis.training.refused) and not (
            ctx.options.plain and ctx.options.dtype == "bfloat16"):
        unnamed_scaler_saves(ctx, analysis.checkpoints)  # (evaluation, with a callback's save)


_CHECKPOINT_EXAMPLES = (
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
checkpoint = torch.load("last.pt")
optimizer.load_state_dict(checkpoint["optimizer"])
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "last.pt")
""",
        after="""\
import torch
from amprewrite_runtime import GradScaler, autocast

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = GradScaler()
checkpoint = torch.load("last.pt")
optimizer.load_state_dict(checkpoint["optimizer"])
if "scaler" in checkpoint:
    scaler.load_state_dict(checkpoint["scaler"])
for x, y in loader:
    optimizer.zero_grad()
    with autocast():
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
torch.save({
    "model": model.state_dict(),
    "optimizer": optimizer.state_dict(),
    "scaler": scaler.state_dict(),
}, "last.pt")
""",
        codes=(SCALER_STATE_SAVED, SCALER_STATE_RESTORED),
    ),
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler()
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda"):
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict()}, "last.pt")
""",
        after=None,
        codes=(),
    ),
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2)
optimizers = [torch.optim.SGD(model.parameters(), lr=0.1)]
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    for opt in optimizers:
        opt.step()
        opt.zero_grad()
torch.save({"optimizers": [o.state_dict() for o in optimizers]}, "last.pt")
""",
        after="""\
import torch
from amprewrite_runtime import GradScaler, autocast

scaler = GradScaler()

model = torch.nn.Linear(4, 2)
optimizers = [torch.optim.SGD(model.parameters(), lr=0.1)]
for x, y in loader:
    with autocast():
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    for opt in optimizers:
        scaler.step(opt)
        opt.zero_grad()
    scaler.update()
torch.save({"optimizers": [o.state_dict() for o in optimizers]}, "last.pt")
""",
        codes=(SCALER_NOT_NAMED,),
    ),
    Example(
        before="""\
import torch
from utils import load_checkpoint

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
load_checkpoint("last.pt", model, optimizer)
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
""",
        after="""\
import torch
from amprewrite_runtime import GradScaler, autocast
from utils import load_checkpoint

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = GradScaler()
load_checkpoint("last.pt", model, optimizer)
for x, y in loader:
    optimizer.zero_grad()
    with autocast():
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        codes=(SCALER_NOT_RESTORED,),
    ),
)


RULE = rule("checkpoint", (SCALER_STATE_SAVED, SCALER_STATE_RESTORED, OPTIMIZER_SAVED_ALONE,
                           SCALER_NOT_NAMED, SCALER_NOT_RESTORED),
            _plan, examples=_CHECKPOINT_EXAMPLES)
