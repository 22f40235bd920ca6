"""Wrap forward passes and loss computations in an autocast block."""

from __future__ import annotations

import libcst as cst

from amprewrite.analysis.training_step import Note, Region
from amprewrite.catalog import CHANGE, Code, declare
from amprewrite.rules.context import RuleContext
from amprewrite.transform import Replace, Wrap

FORWARD_WRAPPED = declare(
    "AMP101", CHANGE, "forward pass and loss wrapped in autocast",
    "Review that the region covers the forward pass and the loss only.",
    why=(
        "A training step's forward pass and loss (the statements a scaled backward "
        "depends on) ran in FP32."
    ),
)

EVALUATION_WRAPPED = declare(
    "AMP106", CHANGE, "evaluation forward pass wrapped in autocast",
    "Inference runs in the low-precision dtype as well.",
    why=(
        "An evaluation loop (under `torch.no_grad()`/`inference_mode()`, or a function "
        "only evaluation calls) runs a model's forward pass."
    ),
    example=(
        "model.eval()\n"
        "with torch.no_grad():\n"
        "    with autocast():\n"
        "        out = model(x)"
    ),
)

SHARED_HELPER_WRAPPED = declare(
    "AMP107", CHANGE, "autocast inside a forward helper shared with evaluation",
    "A helper computing the forward pass and loss for training and for other callers "
    "(evaluation, generator expressions, lambdas) runs them under autocast itself, so every use "
    "does; its callers are not wrapped again.",
    why=(
        "A helper computes the forward pass and the loss for the training step and is "
        "also called from evaluation or other code."
    ),
    example=(
        "def compute_loss(model, x, y):\n"
        "    with autocast():\n"
        "        return criterion(model(x), y)\n"
        "\n"
        "loss = compute_loss(model, x, y)       # training\n"
        "val = compute_loss(model, xv, yv)      # evaluation"
    ),
)

PRODUCER_WRAPPED = declare(
    "AMP108", CHANGE, "autocast where stored outputs are computed",
    "A loss built from values another function stored (`select_action` appending "
    "log-probabilities) gets its region around that function's forward pass, not around the "
    "arithmetic before the loss.",
    why=(
        "The loss is built from outputs another function computed and stored (appended "
        "to a list, kept on `self`)."
    ),
    example=(
        "def select_action(state):\n"
        "    with autocast():\n"
        "        probs = policy(state)\n"
        "    log_probs.append(dist.log_prob(action))\n"
        "\n"
        "loss = -torch.stack(log_probs).sum()"
    ),
)


def decide_hoisted_losses(ctx: RuleContext, regions: list[Region]) -> None:
    """Name the variable each loss computed inside `.backward()` is hoisted into: one fresh
    name serves them all, each being used on the very next line only."""
    hoists = [region.hoist.call for region in regions if region.hoist is not None]
    if hoists:
        name = ctx.names.fresh(("loss", "amp_loss"))
        ctx.hoisted.update({id(call): name for call in hoists})


def wrap_regions(ctx: RuleContext, regions: list[Region], code: Code, what: str) -> None:
    for region in regions:
        item = ctx.parse_expression(ctx.autocast_call)
        message = f"{what} wrapped in `with {ctx.autocast_call}:`"
        tail = []
        if region.hoist is not None:
            tail = [_hoist_loss(ctx, region)]
            name = ctx.hoisted[id(region.hoist.call)]
            message += f"; the loss computed in `.backward()` is now `{name}`"
        ctx.plan.wraps.append(Wrap(region.block, region.start, region.end, item, tail))
        ctx.notes.append(Note(code, region.block.body[region.start], message))


def _hoist_loss(ctx: RuleContext, region: Region) -> cst.SimpleStatementLine:
    """`crit(out, y).backward()` -> `loss = crit(out, y)` (under autocast) + `loss.backward()`."""
    assert region.hoist is not None
    call = region.hoist.call
    assert isinstance(call.func, cst.Attribute)
    name = ctx.hoisted[id(call)]
    receiver = call.func.value.with_changes(lpar=[], rpar=[])
    line = cst.SimpleStatementLine(
        [cst.Assign(targets=[cst.AssignTarget(cst.Name(name))], value=receiver)]
    )

    def use_name(node: cst.CSTNode) -> cst.CSTNode:
        return node.with_changes(value=cst.Name(name))

    ctx.plan.replaces.append(Replace(call.func, use_name))
    return line
