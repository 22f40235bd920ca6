"""Typed call sites: what each backward pass backpropagates and what each `.step()` steps."""

from __future__ import annotations

import libcst as cst
import pytest

from amprewrite.analysis.facts import ModuleFacts, collect
from amprewrite.analysis.kinds import Kind, KindTable
from amprewrite.analysis.sites import BackwardKind, CallSites, call_sites, scaled_step

SOURCE = '''\
import torch
from torch.autograd import backward as bw
from fastai.learner import Learner

model = torch.nn.Linear(4, 2)
netD = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
learn = Learner(model)
for step, (x, y) in enumerate(batches):
    loss = (model(x) - y).pow(2).mean()
    loss.backward()
    (loss / 2).backward()
    torch.autograd.backward([loss, loss])
    bw(tensors=loss, retain_graph=True)
    torch.autograd.backward(*losses)
    accelerator.backward(loss)
    critic = netD(x).mean()
    critic.backward(one)
    learn.backward()
    if step % 4 == 0:
        if optimizer is not None:
            optimizer.step()
    scheduler.step()
    env.step(action)
    opt_g.step()
    scaler.step(optimizer)
'''


@pytest.fixture(scope="module")
def analysed() -> tuple[ModuleFacts, CallSites]:
    facts = collect(cst.parse_module(SOURCE))
    return facts, call_sites(facts, KindTable(facts))


def _text(facts: ModuleFacts, node: cst.CSTNode) -> str:
    return facts.one_line(node)


def test_each_backward_knows_its_loss_and_kind(analysed: tuple[ModuleFacts, CallSites]) -> None:
    facts, sites = analysed
    found = [(_text(facts, s.loss), s.kind, s.method) for s in sites.backwards]
    assert found == [
        ("loss", BackwardKind.LOSS, True),
        ("(loss / 2)", BackwardKind.LOSS, True),
        ("[loss, loss]", BackwardKind.AUTOGRAD, False),
        ("loss", BackwardKind.AUTOGRAD, False),  # `bw(tensors=loss)`, imported under a name
        ("torch.autograd", BackwardKind.AUTOGRAD_UNPACKED, False),
        ("accelerator", BackwardKind.WITH_ARGUMENT, True),
        ("critic", BackwardKind.SEEDED, True),  # a model output seeded with a gradient
        ("learn", BackwardKind.OBJECT, True),
    ]
    assert [s.kind.scalable for s in sites.backwards] == [
        True, True, True, True, False, False, True, False]
    assert sites.backwards[0].keys == {"loss"} and sites.backwards[2].key is None


def test_each_step_knows_its_optimizer_kind_and_guards(
    analysed: tuple[ModuleFacts, CallSites]
) -> None:
    facts, sites = analysed
    found = [(s.key, s.kind, s.with_arguments, len(s.guards)) for s in sites.steps]
    assert found == [
        ("optimizer", Kind.OPTIMIZER, False, 2),
        ("scheduler", Kind.SCHEDULER, False, 0),
        ("env", None, True, 0),
        ("opt_g", Kind.OPTIMIZER, False, 0),  # by its name
        ("scaler", None, True, 0),
    ]
    guarded = sites.steps[0]
    assert [_text(facts, g.test) for g in guarded.guards] == [
        "optimizer is not None", "step % 4 == 0"]  # innermost first
    assert sites.at(guarded.call) is guarded and sites.at(cst.Call(cst.Name("f"))) is None


def test_a_step_through_the_scaler_steps_its_argument(
    analysed: tuple[ModuleFacts, CallSites]
) -> None:
    facts, sites = analysed
    through = sites.steps[-1]
    step = scaled_step(through, facts, KindTable(facts))
    assert (_text(facts, step.optimizer), step.key, step.kind) == (
        "optimizer", "optimizer", Kind.OPTIMIZER)
    assert step.call is through.call and step.guards == through.guards


def test_messages_quote_each_backward_as_written(
    analysed: tuple[ModuleFacts, CallSites]
) -> None:
    facts, sites = analysed
    assert [s.shown(facts) for s in sites.backwards[:4]] == [
        "loss.backward()", "(loss / 2).backward()", "torch.autograd.backward([loss, loss])",
        "bw(loss)"]
