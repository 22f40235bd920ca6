"""Ray Train's deprecated AMP helpers out, first phase: plain FP32 code that the regular
rewrite then turns into explicit native AMP (`prepare_model` and `prepare_data_loader` stay)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis.names import dotted
from amprewrite.analysis.ray_train import RayAmp
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, declare
from amprewrite.rules.context import RuleContext
from amprewrite.rules.edits import as_receiver, remove
from amprewrite.rules.registry import Example, rule
from amprewrite.rules.shared_examples import MIXED_PRECISION_ALREADY
from amprewrite.transform import Replace

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis


RAY_AMP_MIGRATED = declare(
    "AMP430", CHANGE, "Ray Train's deprecated AMP helpers migrated",
    "`train.torch.accelerate(amp=True)`, `prepare_optimizer` and `train.torch.backward(loss)` "
    "give way to explicit native AMP.",
    why=(
        "The script uses Ray Train's deprecated AMP helpers (`accelerate(amp=True)`, "
        "`prepare_optimizer`, `train.torch.backward`)."
    ),
)


def remove_ray_amp(ctx: RuleContext, ray: RayAmp) -> None:
    for statement in ray.accelerate:
        ctx.plan.replaces.append(Replace(statement, remove))
        ctx.notes.append(Note(RAY_AMP_MIGRATED, statement,
                              "deprecated `train.torch.accelerate(amp=...)`"
                              " removed: explicit native AMP replaces it"))
    for statement, call in ray.prepare_optimizer:
        ctx.plan.replaces.append(Replace(statement, _unwrapped_optimizer(call)))
        ctx.notes.append(Note(RAY_AMP_MIGRATED, call,
                              "deprecated `train.torch.prepare_optimizer(...)` "
                              "removed: the grad scaler steps the optimizer"))
    for call in ray.backward:
        ctx.plan.replaces.append(Replace(call, _tensor_backward))
        ctx.notes.append(Note(RAY_AMP_MIGRATED, call, "deprecated `train.torch.backward(loss)` "
                              "replaced by a scaled `loss.backward()`"))


def _unwrapped_optimizer(call: cst.Call):  # type: ignore[no-untyped-def]
    """`optimizer = prepare_optimizer(optimizer)` goes; `o = prepare_optimizer(x)` is `o = x`."""
    wrapped = call.args[0].value

    def build(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.SimpleStatementLine)
        assign = node.body[0]
        if isinstance(assign, cst.Assign) and len(assign.targets) == 1:
            if dotted(assign.targets[0].target) == dotted(wrapped):
                return cst.RemoveFromParent()  # type: ignore[return-value]
            return node.with_changes(body=[assign.with_changes(value=wrapped)])
        return cst.RemoveFromParent()  # type: ignore[return-value]

    return build


def _tensor_backward(node: cst.CSTNode) -> cst.CSTNode:
    assert isinstance(node, cst.Call)
    loss = node.args[0].value
    loss = as_receiver(loss)
    return cst.Call(func=cst.Attribute(loss, cst.Name("backward")), args=node.args[1:])


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    remove_ray_amp(ctx, analysis.ray)


_MIGRATE_RAY_EXAMPLES = (
    Example(
        before="""\
import torch
from ray import train


def train_func(config):
    train.torch.accelerate(amp=True)
    model = train.torch.prepare_model(NeuralNetwork())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    optimizer = train.torch.prepare_optimizer(optimizer)
    for images, targets in data_loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(images), targets)
        train.torch.backward(loss)
        optimizer.step()
""",
        after="""\
import torch
from amprewrite_runtime import GradScaler, autocast
from ray import train


def train_func(config):
    model = train.torch.prepare_model(NeuralNetwork())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    scaler = GradScaler()
    for images, targets in data_loader:
        optimizer.zero_grad()
        with autocast():
            loss = torch.nn.functional.cross_entropy(model(images), targets)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
        codes=(RAY_AMP_MIGRATED,),
    ),
    Example(
        before=MIXED_PRECISION_ALREADY,
        after=None,
        codes=(),
    ),
)


RULE = rule("migrate-ray", (RAY_AMP_MIGRATED,), _plan,
            examples=_MIGRATE_RAY_EXAMPLES)
