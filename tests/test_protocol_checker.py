"""The protocol checker on its own: each invariant holds on a correct training step and is
reported on the step with that one invariant broken, wherever the step lives (module level,
a function, a method of a trainer, split over a helper) and whatever names it uses."""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Callable

import pytest

from amprewrite.protocol.check import violations

CORRECT = """\
{opt}.zero_grad()
with torch.autocast("cpu", dtype=torch.bfloat16):
    loss = {model}(x).pow(2).mean()
{scaler}.scale(loss).backward()
{scaler}.unscale_({opt})
torch.nn.utils.clip_grad_norm_({model}.parameters(), 1.0)
{scaler}.step({opt})
{scaler}.update()
"""

# One invariant broken each: (code, the step's text with it broken).
MUTANTS = {
    "AMP706 clipping before unscale_": ("AMP706", CORRECT.replace(
        "{scaler}.unscale_({opt})\n", "")),
    "AMP705 unscale_ twice": ("AMP705", CORRECT.replace(
        "{scaler}.unscale_({opt})\n", "{scaler}.unscale_({opt})\n{scaler}.unscale_({opt})\n")),
    "AMP703 no update in the loop": ("AMP703", CORRECT.replace("{scaler}.update()\n", "")),
    "AMP708 plain step": ("AMP708", CORRECT.replace(
        "{scaler}.step({opt})", "{opt}.step()")),
    "AMP702 unscaled backward into the step": ("AMP702", CORRECT.replace(
        "{scaler}.unscale_", "{model}(x).sum().backward()\n{scaler}.unscale_")),
    "AMP707 backward in autocast": ("AMP707", CORRECT.replace(
        "    loss = {model}(x).pow(2).mean()\n{scaler}.scale",
        "    loss = {model}(x).pow(2).mean()\n    {scaler}.scale")),
}


def _module_level(step: str) -> str:
    return ("import torch\nmodel = torch.nn.Linear(4, 1)\n"
            "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "scaler = torch.amp.GradScaler('cpu')\n"
            "for x in batches:\n" + textwrap.indent(_names(step, "scaler", "optimizer",
                                                           "model"), "    "))


def _function(step: str) -> str:
    return ("import torch\n\n\ndef train(net, opt, grad_scaler, loader):\n"
            "    for x in loader:\n" + textwrap.indent(_names(step, "grad_scaler", "opt", "net"),
                                                     "        ")
            + "\n\ndef main():\n    net = torch.nn.Linear(4, 1)\n"
            "    opt = torch.optim.Adam(net.parameters())\n"
            "    grad_scaler = torch.amp.GradScaler()\n"
            "    for epoch in range(3):\n        train(net, opt, grad_scaler, [])\n\n\nmain()\n")


def _method(step: str) -> str:
    return ("import torch\nfrom torch.amp import GradScaler\n\n\nclass Trainer:\n"
            "    def __init__(self, model):\n        self.model = model\n"
            "        self.optimizer = torch.optim.AdamW(model.parameters())\n"
            "        self.scaler = GradScaler()\n\n"
            "    def fit(self, loader):\n        for x in loader:\n"
            "            self.train_step(x)\n\n"
            "    def train_step(self, x):\n"
            + textwrap.indent(_names(step, "self.scaler", "self.optimizer", "self.model"),
                              "        "))


def _helper(step: str) -> str:
    """The step's last lines (from `unscale_`, `step()` or `update()`) in a helper."""
    body = _names(step, "scaler", "optimizer", "model").splitlines()
    cut = next((i for i, line in enumerate(body) if "unscale_" in line or ".step(" in line),
               len(body))
    head, tail = body[:cut], body[cut:] or ["pass"]
    return ("import torch\nmodel = torch.nn.Linear(4, 1)\n"
            "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
            "scaler = torch.amp.GradScaler('cpu')\n\n\ndef optimizer_step():\n"
            + textwrap.indent("\n".join(tail), "    ") + "\n\n\nfor x in batches:\n"
            + textwrap.indent("\n".join([*head, "optimizer_step()"]), "    ") + "\n")


PLACEMENTS: dict[str, Callable[[str], str]] = {
    "module level": _module_level, "function": _function, "method": _method,
    "helper": _helper,
}


def _names(step: str, scaler: str, opt: str, model: str) -> str:
    return step.format(scaler=scaler, opt=opt, model=model)


def _codes(source: str) -> list[str]:
    return [v.code.id for v in violations(ast.parse(source), source)]


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_a_correct_step_breaks_nothing(placement: str) -> None:
    assert _codes(PLACEMENTS[placement](CORRECT)) == []


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("mutant", MUTANTS)
def test_each_broken_invariant_is_reported(placement: str, mutant: str) -> None:
    code, step = MUTANTS[mutant]
    if placement == "helper" and code == "AMP707":
        pytest.skip("the helper keeps the region's lines in the loop: same as module level")
    assert code in _codes(PLACEMENTS[placement](step))


NONE_GUARDED = """\
if {scaler} is not None:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = {model}(x).pow(2).mean()
    {scaler}.scale(loss).backward()
    {scaler}.step({opt})
    {scaler}.update()
else:
    loss = {model}(x).pow(2).mean()
    loss.backward()
    {opt}.step()
"""


@pytest.mark.parametrize("setup", [
    "scaler = None\nif args.amp:\n    scaler = torch.amp.GradScaler()\n",
    "scaler = torch.amp.GradScaler() if args.amp else None\n",
    "scaler = None\nif not args.no_amp:\n    scaler = torch.cuda.amp.GradScaler()\n",
])
@pytest.mark.parametrize("where", ["module", "function"])
def test_a_scaler_that_may_be_none_is_narrowed_by_its_tests(setup: str, where: str) -> None:
    """DINO's layout: the FP32 branch (`is None`) must not call the scaler."""
    step = _names(NONE_GUARDED, "scaler", "optimizer", "model")
    broken = step.replace("is not None", "is None", 1)
    head = "import torch\nmodel = torch.nn.Linear(4, 1)\noptimizer = torch.optim.SGD([], 0.1)\n"
    for text, expected in ((step, []), (broken, ["AMP701"])):
        if where == "module":
            source = head + setup + "for x in batches:\n" + textwrap.indent(text, "    ")
        else:
            source = (head + setup + "\n\ndef train(model, optimizer, scaler):\n"
                      "    for x in batches:\n" + textwrap.indent(text, "        ")
                      + "\n\ntrain(model, optimizer, scaler)\n")
        assert sorted(set(_codes(source))) == expected, source


def test_a_parameter_tested_against_none_may_be_none() -> None:
    """Followed from its own entry (nothing in the module calls it), a function testing its
    scaler against None expects None there."""
    source = textwrap.dedent("""\
        def train_one_epoch(model, optimizer, fp16_scaler):
            loss = model(x).sum()
            if fp16_scaler is None:
                fp16_scaler.scale(loss).backward()
            else:
                loss.backward()
    """)
    assert _codes(source) == ["AMP701"]


def test_a_flag_the_scaler_was_created_under_guards_its_use() -> None:
    source = textwrap.dedent("""\
        import torch
        if args.amp:
            scaler = torch.amp.GradScaler()
        for x in batches:
            loss = model(x).sum()
            if args.amp:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()
    """)
    assert _codes(source) == []
    assert _codes(source.replace("    if args.amp:\n        scaler.scale",
                                 "    if True:\n        scaler.scale")) == ["AMP701"]


def test_a_disabled_scaler_is_a_plain_step() -> None:
    """`GradScaler(enabled=use_amp)`: where the flag is off, its step is a plain step."""
    source = textwrap.dedent("""\
        import torch
        scaler = torch.amp.GradScaler(enabled=use_amp)
        for x in batches:
            loss = model(x).sum()
            if use_amp:
                scaler.scale(loss).backward()
            else:
                loss.backward()
            scaler.step(optimizer)
            scaler.update()
    """)
    assert _codes(source) == []
    assert _codes(source.replace("    if use_amp:", "    if other:")) == ["AMP702"]


def test_lazy_regularisation_updates_after_each_step() -> None:
    """The same optimizer stepped twice per iteration is valid with an update after each."""
    source = textwrap.dedent("""\
        import torch
        scaler = torch.amp.GradScaler()
        for i, x in enumerate(batches):
            opt.zero_grad()
            scaler.scale(g(x).mean()).backward()
            scaler.step(opt)
            scaler.update()
            if i % 4 == 0:
                opt.zero_grad()
                scaler.scale(g(x).abs().mean()).backward()
                scaler.step(opt)
                scaler.update()
    """)
    assert _codes(source) == []
    assert "AMP703" in _codes(source.replace("    scaler.update()\n    if i", "    if i"))


def test_optimizers_of_a_collection_are_each_stepped_once() -> None:
    source = textwrap.dedent("""\
        import torch
        scaler = torch.amp.GradScaler()
        optimizers = {"g": torch.optim.Adam(g.parameters()), "d": torch.optim.Adam(d.parameters())}
        for x in batches:
            for opt in optimizers.values():
                opt.zero_grad()
            scaler.scale(loss_of(x)).backward()
            for name, opt in optimizers.items():
                scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(g.parameters(), 1.0)
            for opt in optimizers.values():
                scaler.step(opt)
            scaler.update()
    """)
    assert _codes(source) == []


def test_a_backward_feeds_only_the_optimizers_of_the_models_its_loss_ran() -> None:
    """A GAN's plain critic backward does not reach the generator's optimizer."""
    source = textwrap.dedent("""\
        import torch
        scaler = torch.amp.GradScaler()
        opt_g = torch.optim.Adam(G.parameters())
        opt_c = torch.optim.Adam(C.parameters())
        for x in batches:
            c_loss = C(x).mean()
            c_loss.backward()
            opt_c.step()
            z = torch.randn(8, 4)
            fake = G(z)
            g_loss = -D(fake).mean()
            scaler.scale(g_loss).backward()
            scaler.step(opt_g)
            scaler.update()
    """)
    assert _codes(source) == []
    assert "AMP702" in _codes(source.replace("c_loss = C(x).mean()", "c_loss = G(x).mean()"))


def test_no_update_in_a_callback_nothing_calls() -> None:
    """fastai-style: the step is a callback a framework calls; nothing updates the scaler."""
    source = textwrap.dedent("""\
        import torch
        class TrainCB:
            def __init__(self):
                self.scaler = torch.amp.GradScaler()
            def backward(self, learn):
                self.scaler.scale(learn.loss).backward()
            def step(self, learn):
                self.scaler.step(learn.opt)
    """)
    assert _codes(source) == ["AMP704"]
    updated = source + "    def after_step(self, learn):\n        self.scaler.update()\n"
    assert _codes(updated) == []


def test_gradients_of_inputs_are_not_the_optimizers() -> None:
    """An attack's `x.grad` (a tensor's own gradient) needs no unscale_."""
    source = textwrap.dedent("""\
        import torch
        scaler = torch.amp.GradScaler()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            x.requires_grad_()
            model(x).sum().backward()
            x_adv = x + 0.1 * x.grad.sign()
            optimizer.zero_grad()
            scaler.scale(model(x_adv).sum()).backward()
            scaler.step(optimizer)
            scaler.update()
    """)
    assert _codes(source) == []


@pytest.mark.parametrize("call", [
    "z, log_det = self.flow.backward(z)", "[z, log_det] = flow.backward(z)",
    "z, (a, b) = flow.backward(z)",
])
def test_a_backward_whose_result_is_unpacked_is_no_tensors(call: str) -> None:
    """A normalizing flow's inverse named `backward`, run by the evaluation under autocast: a
    tensor's backward returns None, so its result unpacked is no backward pass."""
    source = textwrap.dedent("""\
        import torch
        class Sampler:
            def sample(self, flow, z):
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    {call}
                return z
    """).format(call=call)
    assert _codes(source) == []
    assert _codes(source.replace(call, "flow.backward(z)")) == ["AMP707"]
