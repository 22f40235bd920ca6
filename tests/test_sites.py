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


SEEDED_PREAMBLE = '''\
import torch
netD = torch.nn.Linear(2, 1)
one = torch.FloatTensor([1])
mone = one * -1
'''


@pytest.mark.parametrize(("source", "kind"), [
    # reassigned across lines, at module level, seeded by a legacy tensor
    ("d = netD(x)\nd = d.mean(0).view(1)\nd.backward(mone)\n", BackwardKind.SEEDED),
    # in a function, the seed made elsewhere, keywords after it
    ("def f(x):\n    d = netD(x).mean()\n    d.backward(mone, retain_graph=True)\n",
     BackwardKind.SEEDED),
    # the same name is a gradient in another function: only the function's own count
    ("def p(x):\n    d = torch.autograd.grad(netD(x).sum(), x)[0]\n    return d\n"
     "def f(x):\n    d = -netD(x).mean()\n    d.backward(one)\n", BackwardKind.SEEDED),
    # an output kept on `self` by another method of the class
    ("class T:\n    def fwd(self, x):\n        self.out = netD(x).mean()\n"
     "    def bwd(self):\n        self.out.backward(self.mone)\n", BackwardKind.SEEDED),
    # returned by a method of the class, by a module function, or inline
    ("class T:\n    def critic(self, x):\n        return netD(x).mean(0).view(1)\n"
     "    def step(self, x):\n        d = self.critic(x)\n        d.backward(self.one)\n",
     BackwardKind.SEEDED),
    ("def critic(x):\n    return netD(x)[0]\nout = critic(x)\nout.backward(torch.tensor(-1.0))\n",
     BackwardKind.SEEDED),
    ("netD(x).mean().backward(mone)\n", BackwardKind.SEEDED),
    # backpropagated by a helper that every caller hands a model output
    ("def bw(out, seed):\n    out.backward(seed)\nd = netD(x).mean()\nbw(d, one)\n"
     "bw(netD(y).mean(), seed=mone)\n", BackwardKind.SEEDED),
    # not a model output: a framework's backward, a plain tensor, a helper nobody calls,
    # a helper one caller hands something else, a name only a parameter binds
    ("accelerator.backward(loss)\n", BackwardKind.WITH_ARGUMENT),
    ("w = torch.randn(3, requires_grad=True)\nw.backward(one)\n", BackwardKind.WITH_ARGUMENT),
    ("def bw(out, seed):\n    out.backward(seed)\n", BackwardKind.WITH_ARGUMENT),
    ("def bw(out, seed):\n    out.backward(seed)\nbw(netD(x).mean(), one)\nbw(w, one)\n",
     BackwardKind.WITH_ARGUMENT),
    ("def f(d):\n    d = d.mean()\n    d.backward(one)\n", BackwardKind.WITH_ARGUMENT),
    ("d = netD(x)\nd, aux = helper(x)\nd.backward(one)\n", BackwardKind.WITH_ARGUMENT),
])
def test_a_seeded_backward_of_a_model_output_is_scalable(source: str, kind: BackwardKind) -> None:
    facts = collect(cst.parse_module(SEEDED_PREAMBLE + source))
    sites = call_sites(facts, KindTable(facts))
    assert [site.kind for site in sites.backwards] == [kind] * len(sites.backwards)


@pytest.mark.parametrize(("source", "kind"), [
    ("optims = EasyDict(g=torch.optim.Adam(g.parameters()))\noptims.g.step()\n",
     Kind.OPTIMIZER),
    ("optims = munchify({'g': torch.optim.Adam(g.parameters())})\noptims.g.step()\n",
     Kind.OPTIMIZER),
    ("class T:\n    def __init__(self, nets):\n        self.opt = edict()\n"
     "        for name, net in nets.items():\n"
     "            self.opt[name] = torch.optim.SGD(net.parameters(), lr=0.1)\n"
     "    def step(self):\n        self.opt.critic.step()\n", Kind.OPTIMIZER),
    # a plain dict's items are no attributes; a container's own methods are no items
    ("optims = {}\noptims['g'] = torch.optim.Adam(g.parameters())\noptims.g.step()\n", None),
    ("optims = EasyDict(g=torch.optim.Adam(g.parameters()))\noptims.values.step()\n", None),
    ("cfg = EasyDict(lr=0.1, epochs=3)\ncfg.lr.step()\n", None),
])
def test_the_attributes_of_an_attribute_dict_of_optimizers_are_optimizers(
    source: str, kind: Kind | None
) -> None:
    facts = collect(cst.parse_module("import torch\n" + source))
    assert [site.kind for site in call_sites(facts, KindTable(facts)).steps] == [kind]


FLOW = '''\
import torch
from torch import nn


class Flow(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x):
        return x

    def backward(self, z):
        for layer in self.layers[::-1]:
            z, log_det = layer.backward(z)
        return z


class Model(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.flow = Flow(layers)

'''


@pytest.mark.parametrize("source", [
    # its result unpacked (a tensor's backward returns None), in a method or at module level
    "    def sample(self, z):\n        [xs, log_det] = self.flow.backward(z)\n        return xs\n",
    "    def sample(self, z):\n        return self.flow.backward(z)\n",  # a model here has one
    "\n\nflow = Flow([])\nx, _ = flow.backward(torch.randn(2, 2))\n",
    "\n\nflow = Flow([])\nprint(flow.backward(torch.randn(2, 2)))\n",
    "\n\nmodel = Flow([])\nmodel.backward(torch.randn(2, 2))\n",
])
def test_a_models_own_method_named_backward_is_no_loss_backward(source: str) -> None:
    facts = collect(cst.parse_module(FLOW + source))
    sites = call_sites(facts, KindTable(facts))
    assert [site.kind for site in sites.backwards] == [BackwardKind.OBJECT] * 2


@pytest.mark.parametrize("source", [
    "def step(loss, critic, one):\n    critic.backward(one)\n    loss.backward()\n",
    "def step(loss):\n    result = loss.backward()\n    return result\n",  # one name: None
])
def test_a_backward_of_a_value_stays_a_backward(source: str) -> None:
    """Without a model class defining `backward`, a tensor's backward stays one, even with a
    seed or with its None result kept."""
    facts = collect(cst.parse_module("import torch\n" + source))
    kinds = [site.kind for site in call_sites(facts, KindTable(facts)).backwards]
    assert BackwardKind.OBJECT not in kinds and kinds
