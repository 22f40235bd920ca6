"""Determined's PyTorchTrial and Enchanter's runners take a torch grad scaler: give them one,
and autocast their forward passes, the way their documentation prescribes."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis.facts import CallSite
from amprewrite.analysis.scaler_home import SCALER_NAMES
from amprewrite.analysis.trainer_apis import TrainerApis, TrainerClass
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, SKIP, declare
from amprewrite.rules.autocast import EVALUATION_WRAPPED, FORWARD_WRAPPED, wrap_regions
from amprewrite.rules.context import RuleContext
from amprewrite.rules.edits import append_arguments, keyword
from amprewrite.rules.imports import torch_name
from amprewrite.rules.loss_scaling import UPDATE_ADDED
from amprewrite.rules.registry import Example, rule
from amprewrite.rules.shared_examples import MIXED_PRECISION_ALREADY
from amprewrite.transform import Insert, Replace

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis

TRAINER_SCALER_ADDED = declare(
    "AMP440", CHANGE, "trainer API given a grad scaler",
    "Determined: `self.scaler = context.wrap_scaler(GradScaler())`, scaled `context.backward`, "
    "`step_optimizer(..., scaler=...)`, `update()`. Enchanter: `runner.scaler = GradScaler()` "
    "(custom runners: in `__init__`).",
    why="A Determined trial or an Enchanter runner trains without a grad scaler.",
)

TRAINER_WITHOUT_INIT = declare(
    "AMP441", SKIP, "trainer class without `__init__`",
    "The grad scaler must be created once per trainer: add an `__init__`.",
    why="A trainer class that needs a grad scaler has no `__init__` to create it in.",
    example=(
        "class Trial(PyTorchTrial):   # no __init__ to create the scaler in\n"
        "    def train_batch(self, batch, epoch_idx, batch_idx): ..."
    ),
)


def adopt_trainer_apis(ctx: RuleContext, apis: TrainerApis, torch: str) -> None:
    """`ctx.autocast_call` is `torch.autocast("cuda")` (these APIs train on GPUs)."""
    name = ctx.names.fresh(SCALER_NAMES)
    for trainer in apis.classes:
        _adopt_class(ctx, trainer, f"self.{name}", torch)
    for runner in apis.runners:
        code = f"{runner.keys[0]}.{name} = {torch}.amp.GradScaler()"
        block, index = ctx.facts.position(runner.statement)
        ctx.plan.inserts.append(Insert(block, index + 1, [ctx.parse_statement(code)]))
        ctx.notes.append(Note(TRAINER_SCALER_ADDED, runner.statement, "Enchanter runner: mixed "
                              f"precision switched on by `{code}`"))


def _adopt_class(ctx: RuleContext, trainer: TrainerClass, scaler: str, torch: str) -> None:
    if trainer.init is None or not isinstance(trainer.init.body, cst.IndentedBlock):
        ctx.notes.append(Note(TRAINER_WITHOUT_INIT, trainer.cls,
                              "no `__init__` to create the grad scaler "
                              "in; add one that sets `self.scaler`"))
        return
    constructor = f"{torch}.amp.GradScaler()"
    if trainer.api == "determined":
        constructor = f"{trainer.context}.wrap_scaler({constructor})"
    body = trainer.init.body.body
    index = len(body) - 1 if body and _calls_super_init(body[-1]) else len(body)
    ctx.plan.inserts.append(Insert(trainer.init.body, index,
                                   [ctx.parse_statement(f"{scaler} = {constructor}")]))
    ctx.notes.append(Note(TRAINER_SCALER_ADDED, trainer.cls,
                          f"{trainer.api}: `{scaler} = {constructor}` "
                          "created in `__init__`"))
    wrap_regions(ctx, trainer.regions, FORWARD_WRAPPED, "forward pass and loss")
    wrap_regions(ctx, trainer.eval_regions, EVALUATION_WRAPPED, "evaluation forward pass")
    for site in trainer.backwards:  # context.backward(loss) -> context.backward(scaler.scale(loss))
        scale = ctx.parse_expression(f"{scaler}.scale")
        ctx.plan.replaces.append(Replace(site.call.args[0].value, partial(_scaled, scale=scale)))
    for site in trainer.steps:
        ctx.plan.replaces.append(Replace(site.call, append_arguments(
            [keyword("scaler", ctx.parse_expression(scaler))])))
    if trainer.steps:
        _update_after(ctx, trainer.steps[-1], scaler)



def _scaled(node: cst.CSTNode, scale: cst.BaseExpression) -> cst.CSTNode:
    """`loss` -> `scaler.scale(loss)` (its parentheses dropped)."""
    assert isinstance(node, cst.BaseExpression)
    return cst.Call(func=scale, args=[cst.Arg(node.with_changes(lpar=[], rpar=[]))])


def _update_after(ctx: RuleContext, step: CallSite, scaler: str) -> None:
    block, index = ctx.facts.position(step.statement)
    ctx.plan.inserts.append(Insert(block, index + 1, [ctx.parse_statement(f"{scaler}.update()")]))
    ctx.notes.append(Note(UPDATE_ADDED, step.call, f"`{scaler}.update()` added after the optimizer "
                          "step"))


def _calls_super_init(statement: cst.CSTNode) -> bool:
    code = cst.Module([]).code_for_node(statement)
    return "super(" in code and "__init__(" in code


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    torch = torch_name(ctx.facts)
    adopt_trainer_apis(ctx, analysis.trainer_apis, torch or "torch")
    if torch is None:
        ctx.plan.inserts.insert(0, Insert(ctx.facts.module, ctx.facts.header_imports_end,
                                          [ctx.parse_statement("import torch")]))


_TRAINER_APIS_EXAMPLES = (
    Example(
        before="""\
from enchanter.wrappers import ClassificationRunner


def run(net, optimizer, criterion, experiment, train_loader):
    runner = ClassificationRunner(net, optimizer, criterion, experiment)
    runner.add_loader("train", train_loader)
    runner.run()
""",
        after="""\
from enchanter.wrappers import ClassificationRunner
import torch


def run(net, optimizer, criterion, experiment, train_loader):
    runner = ClassificationRunner(net, optimizer, criterion, experiment)
    runner.scaler = torch.amp.GradScaler()
    runner.add_loader("train", train_loader)
    runner.run()
""",
        codes=(TRAINER_SCALER_ADDED,),
    ),
    Example(
        before=MIXED_PRECISION_ALREADY,
        after=None,
        codes=(),
    ),
)


RULE = rule("trainer-apis", (TRAINER_SCALER_ADDED, TRAINER_WITHOUT_INIT), _plan,
            examples=_TRAINER_APIS_EXAMPLES,
            reports=(FORWARD_WRAPPED, EVALUATION_WRAPPED, UPDATE_ADDED))
