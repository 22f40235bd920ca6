"""Function summaries: direct effects, effects through local calls, methods, recursion."""

from __future__ import annotations

import libcst as cst

from amprewrite.analysis.facts import collect
from amprewrite.analysis.kinds import KindTable
from amprewrite.analysis.summaries import Summaries, Summary
from amprewrite.analysis.unscaling import reads_grad

SOURCE = '''\
import torch
import torch.nn.functional as F

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def fgsm(net, x, y, eps):
    x = x.clone().requires_grad_(True)
    loss = F.cross_entropy(net(x), y)
    loss.backward()
    return x + eps * x.grad.sign()


def penalty(critic, x):
    return torch.autograd.grad(critic(x).sum(), x, create_graph=True)[0].norm()


def attack_twice(x, y):
    return fgsm(model, fgsm(model, x, y, 0.1), y, 0.1)


def ping(n):
    return pong(n - 1) if n else model(torch.zeros(4))


def pong(n):
    return ping(n)


def load(n):
    return torch.randn(n, 4)


class Trainer:
    def step(self, x, y):
        self.loss(x, y).backward()
        optimizer.step()

    def loss(self, x, y):
        return F.mse_loss(model(x), y)
'''


def _summaries() -> tuple[Summaries, dict[str, cst.FunctionDef]]:
    facts = collect(cst.parse_module(SOURCE))
    functions = {f.name.value: f for f in facts.functions}
    return Summaries(facts, KindTable(facts)), functions


def test_direct_effects() -> None:
    summaries, functions = _summaries()
    assert summaries.functions[functions["fgsm"]] == Summary(
        forward=True, loss=True, backward=True, reads_grad=True)
    assert summaries.functions[functions["penalty"]] == Summary(forward=True, backward=True)
    assert summaries.functions[functions["load"]] == Summary()


def test_effects_through_local_calls_and_methods() -> None:
    summaries, functions = _summaries()
    attack = summaries.functions[functions["attack_twice"]]
    assert attack.backward and attack.forward and attack.reads_grad and not attack.steps
    step = summaries.functions[functions["step"]]
    assert step.forward and step.loss and step.backward and step.steps


def test_recursion_terminates_and_propagates() -> None:
    summaries, functions = _summaries()
    assert summaries.functions[functions["ping"]].forward
    assert summaries.functions[functions["pong"]].forward


def test_a_statement_summary_includes_its_callees() -> None:
    summaries, functions = _summaries()
    caller = functions["attack_twice"]
    line = caller.body.body[0]
    assert summaries.of_node(line, caller).backward
    assert summaries.callee(line.body[0].value, caller) is functions["fgsm"]  # type: ignore[attr-defined]


def test_autograd_grad_is_not_a_read_of_grad() -> None:
    """`torch.autograd.grad(...)` computes gradients; only `x.grad` reads them (a helper
    calling both must still count as a training step)."""
    assert not reads_grad(cst.parse_module("g, = torch.autograd.grad(out.sum(), x)\n"))
    assert not reads_grad(cst.parse_module("g = autograd.grad(out, x)[0]\n"))
    assert reads_grad(cst.parse_module("norm = p.grad.norm()\n"))
