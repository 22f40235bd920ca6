"""Where the analysis cannot see, the rewrite takes the safe form (or leaves the site alone
with a finding), never the harmless-looking one."""

from __future__ import annotations

import pytest

from amprewrite.engine import rewrite_source
from amprewrite.options import Options
from tests.execution import BFLOAT16, DTYPE_ENVS, FIXTURES_DIR, FLOAT16, FLOAT32, Job, run_scripts

STEP = '''\
import torch
{imports}

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
logger = logging.getLogger(__name__)
meter = Meter()
for i, (x, y) in enumerate(loader):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    {between}
    optimizer.step()
'''


def _rewrite(between: str, imports: str = "import logging") -> tuple[str, list[str]]:
    source = STEP.format(imports=imports, between=between)
    result = rewrite_source(source.encode(), Options())
    return result.source.decode(), [f.format("t.py") for f in result.findings]


@pytest.mark.parametrize(("between", "imports"), [
    ("clip_gradient(optimizer, 5.0)", "from utils import *"),
    ("d2l.grad_clipping(model, 1)", "import d2l"),
    ("utils.clip(model.parameters(), 1)", "import utils"),
    ("hooks.after_backward(model)", "import hooks"),
    ("callback.on_after_backward(trainer)", "from callbacks import callback, trainer"),
    ("sync_grads()", "from utils import *"),  # a star import's module may hold the model
    ("params = list(model.parameters()); scale_grads(params)", "from utils import scale_grads"),
])
def test_a_call_that_may_reach_the_parameters_is_preceded_by_unscale(
    between: str, imports: str
) -> None:
    output, findings = _rewrite(between, imports)
    lines = output.splitlines()
    unscale = lines.index("    scaler.unscale_(optimizer)")
    assert lines[unscale + 1] == f"    {between}"
    assert any("AMP110" in f and "cannot see into" in f for f in findings)


@pytest.mark.parametrize("between", [
    'print(f"loss {loss.item():.3f}")',
    'logger.info("loss %.3f", loss.item())',
    "meter.update(loss.item(), x.size(0))",
    "torch.cuda.synchronize()",
    "losses.append(loss.detach())",
    "n = sum(p.numel() for p in model.parameters())",
])
def test_a_call_given_only_values_needs_no_unscale(between: str) -> None:
    output, findings = _rewrite(between)
    assert "unscale_" not in output
    assert not any("AMP110" in f for f in findings)


def test_a_call_outside_the_accumulation_guard_is_reported_not_unscaled() -> None:
    """`unscale_` there would run on every micro-batch (and raise on the second)."""
    source = '''\
import torch
from utils import average_gradients

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for i, (x, y) in enumerate(loader):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    average_gradients(model)
    if (i + 1) % 4 == 0:
        optimizer.step()
        optimizer.zero_grad()
'''
    result = rewrite_source(source.encode(), Options())
    assert b"unscale_" not in result.source
    findings = [f.format("t.py") for f in result.findings]
    assert ("t.py:9:5: AMP213 `average_gradients(...)` runs before `optimizer.step()` on every "
            "micro-batch, where its gradients are still scaled; left as is") in findings


def test_an_inherited_method_is_opaque() -> None:
    """`self.clip_gradients()` comes from a base class in another module."""
    source = '''\
import torch
from base import BaseTrainer


class Trainer(BaseTrainer):
    def __init__(self, model):
        self.model = model
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step(self, x, y):
        self.optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        loss.backward()
        self.clip_gradients()
        self.optimizer.step()
'''
    output = rewrite_source(source.encode(), Options()).source.decode()
    assert "self.scaler.unscale_(self.optimizer)\n        self.clip_gradients()" in output


# Flags are kept ----------------------------------------------------------------------------
FLAG_CASES = {"lint_flag_gated_amp": "--use-amp", "migrate_apex_behind_flag": "--amp"}


@pytest.mark.parametrize("name", sorted(FLAG_CASES))
def test_without_its_flag_a_rewritten_script_trains_in_fp32_as_before(name: str) -> None:
    """The FP32 branch of flag-gated AMP never meets a scaler that only the flag creates
    (UnboundLocalError), nor one created where the flag is not bound (NameError)."""
    directory = FIXTURES_DIR / name
    fp32, rewritten = run_scripts([Job.of(directory / "input.py"),
                                   Job.of(directory / "expected_O1.py")])
    assert fp32.ok and rewritten.ok, rewritten.explain()
    assert set(rewritten.train_dtypes) == {FLOAT32}
    assert rewritten.losses == fp32.losses


@pytest.mark.parametrize("dtype", [BFLOAT16, FLOAT16])
@pytest.mark.parametrize("level", ["O1", "O2"])
def test_with_its_flag_a_migrated_apex_script_trains_at_its_level(level: str, dtype: str) -> None:
    directory = FIXTURES_DIR / "migrate_apex_behind_flag"
    fp32, amp = run_scripts([
        Job.of(directory / "input.py"),
        Job.of(directory / "expected_O1.py", ["--amp", "--opt-level", level], DTYPE_ENVS[dtype])])
    assert amp.ok, amp.explain()
    assert set(amp.train_dtypes) == {dtype}
    assert amp.autocast_forwards > 0 if level == "O1" else amp.autocast_forwards == 0
    assert amp.losses[-1] == pytest.approx(fp32.losses[-1], rel=0.1)


# No silent FP32 ------------------------------------------------------------------------------
def test_every_forward_left_fp32_on_the_training_path_is_reported() -> None:
    source = '''\
import torch
import torch.nn.functional as F
from attacks import pgd


class Trainer:
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer

    def adversarial(self, x, y):
        x_adv = x.clone().requires_grad_(True)
        F.cross_entropy(self.model(x_adv), y).backward()
        return (x_adv + 0.1 * x_adv.grad.sign()).detach()

    def train_step(self, x, y):
        x_adv = self.adversarial(x, y)
        x_pgd = pgd(self.model, x, y)
        self.optimizer.zero_grad()
        loss = F.cross_entropy(self.model(x_adv), y) + F.cross_entropy(self.model(x_pgd), y)
        loss.backward()
        self.optimizer.step()


model = torch.nn.Linear(8, 3)
trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1))
'''
    findings = [f.format("t.py") for f in rewrite_source(source.encode(), Options()).findings]
    assert ("t.py:12:25: AMP215 `self.model(...)` runs outside autocast on the training path "
            "and stays FP32") in findings
    assert ("t.py:17:17: AMP215 `pgd(...)` is handed the model `self.model` outside autocast: "
            "its forward passes stay FP32") in findings
    assert not any("AMP215" in f and ":19:" in f for f in findings)  # the training forward


ATTACKS = '''\
import torch
import torch.nn.functional as F


class PGD:
    def __init__(self, model, steps=3):
        self.model, self.steps = model, steps

    def perturb(self, x, y):
        x_adv = x.clone().detach()
        for _ in range(self.steps):
            x_adv.requires_grad_(True)
            loss_adv = F.cross_entropy(self.model(x_adv), y)
            grad = torch.autograd.grad(loss_adv, x_adv)[0]
            x_adv = (x_adv + 0.01 * grad.sign()).detach()
        return x_adv


def fgsm(model, x, y):
    x = x.clone().requires_grad_(True)
    grad, = torch.autograd.grad(F.cross_entropy(model(x), y), [x])
    return (x + 0.05 * grad.sign()).detach()


{train}
'''


@pytest.mark.parametrize("train", [
    # at module level
    "model = torch.nn.Linear(8, 2)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "attacker = PGD(model)\nfor x, y in loader:\n    x_adv = attacker.perturb(x, y)\n"
    "    x_fast = fgsm(model, x, y)\n    opt.zero_grad()\n"
    "    loss = F.cross_entropy(model(x_adv), y) + F.cross_entropy(model(x_fast), y)\n"
    "    loss.backward()\n    opt.step()\nprint(model(x).sum())\n",
    # in a function
    "def train(model, opt, loader):\n    attacker = PGD(model)\n    for x, y in loader:\n"
    "        x_adv = attacker.perturb(x, y)\n        x_fast = fgsm(model, x, y)\n"
    "        opt.zero_grad()\n"
    "        loss = F.cross_entropy(model(x_adv), y) + F.cross_entropy(model(x_fast), y)\n"
    "        loss.backward()\n        opt.step()\n\n\nmodel = torch.nn.Linear(8, 2)\n"
    "train(model, torch.optim.SGD(model.parameters(), lr=0.1), loader)\n",
])
def test_an_attack_computing_its_gradient_with_autograd_grad_is_reported_as_fp32(
    train: str
) -> None:
    """An attack object's `perturb` and an FGSM function differentiate with
    `torch.autograd.grad`, not `.backward()`: their forward passes stay FP32 and say so."""
    result = rewrite_source(ATTACKS.format(train=train).encode(), Options())
    reported = {f.line for f in result.findings if f.code == "AMP215"}
    assert {13, 21} <= reported, result.findings
    assert "scaler.scale(loss).backward()" in result.source.decode()


# Every save of an optimizer's state carries the scaler's, or says why not ------------------
def test_a_save_where_no_scaler_can_be_named_is_reported() -> None:
    """A callback in the entry module saves `trainer.optimizer`'s state; the training step,
    and so the scaler, is in the trainer's module."""
    source = '''\
import torch
from trainer import Trainer


class Checkpoint:
    def on_epoch_end(self, trainer, epoch):
        torch.save({"model": trainer.model.state_dict(),
                    "optimizer": trainer.optimizer.state_dict()}, "last.pt")
'''
    result = rewrite_source(source.encode(), Options())
    assert not result.changed
    assert ("t.py:8:21: AMP126 the optimizer's state is saved here, but no grad scaler can be "
            "named in this file: save the scaler's state next to it (the training step is "
            "elsewhere)") in [f.format("t.py") for f in result.findings]


RESTORE = '''\
import torch
{imports}

{helper}
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
{restore}
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
'''
RESTORER = '''\
def restart_from_checkpoint(path, **kwargs):
    checkpoint = torch.load(path)
    for key, value in kwargs.items():
        {guard}value.load_state_dict(checkpoint[key])

'''


@pytest.mark.parametrize(("imports", "helper", "restore", "expected", "code"), [
    # a keyword-driven restorer of the file, loading only what the checkpoint has
    ("", RESTORER.format(guard="if key in checkpoint:\n            "),
     "restart_from_checkpoint(path, state_dict=model, optimizer=optimizer)",
     "    optimizer=optimizer,\n    scaler=scaler,\n)", "AMP121"),
    # ... and one that would fail on a checkpoint written before the rewrite
    ("", RESTORER.format(guard=""),
     "restart_from_checkpoint(path, state_dict=model, optimizer=optimizer)",
     "restart_from_checkpoint(path, state_dict=model, optimizer=optimizer)\n", "AMP227"),
    # a restorer the file imports, and a restore from an expression
    ("import utils", "", "utils.restart_from_checkpoint(path, optimizer=optimizer)",
     "utils.restart_from_checkpoint(path, optimizer=optimizer)\n", "AMP227"),
    ("", "", "optimizer.load_state_dict(torch.load(path)['opt'])",
     "optimizer.load_state_dict(torch.load(path)['opt'])\n", "AMP227"),
    # a pickled optimizer resumed by assignment
    ("", "", "checkpoint = torch.load(path)\noptimizer = checkpoint['optimizer']",
     "optimizer = checkpoint['optimizer']\nscaler = GradScaler()\nif 'scaler' in checkpoint:\n"
     "    scaler.load_state_dict(checkpoint['scaler'])\n", "AMP121"),
])
def test_every_restore_of_an_optimizer_restores_the_scaler_or_says_why_not(
    imports: str, helper: str, restore: str, expected: str, code: str
) -> None:
    source = RESTORE.format(imports=imports, helper=helper, restore=restore)
    result = rewrite_source(source.encode(), Options())
    assert expected in result.source.decode()
    restore_line = source.splitlines().index(restore.splitlines()[-1]) + 1
    assert any(f.code == code and f.line == restore_line for f in result.findings), (
        result.findings)


def test_a_pickled_optimizer_is_saved_with_the_scaler_state_not_the_options() -> None:
    """`{"optimizer": optimizer}` pickles the optimizer: the scaler's state joins it;
    `{"opt": opt}` holds the script's options."""
    source = RESTORE.format(imports="", helper="", restore="opt = parser.parse_args()") + (
        "torch.save({'model': model, 'optimizer': optimizer}, 'a.pt')\n"
        "torch.save({'model': model, 'opt': opt}, 'b.pt')\n")
    output = rewrite_source(source.encode(), Options()).source.decode()
    assert "    'optimizer': optimizer,\n    'scaler': scaler.state_dict(),\n}, 'a.pt')" in output
    assert "torch.save({'model': model, 'opt': opt}, 'b.pt')" in output


def test_a_callback_module_with_evaluation_reports_its_optimizer_save_and_restore() -> None:
    """Evaluation gets autocast, but no scaler can be named for the trainer's optimizer the
    callbacks save and restore (the training step is in another file)."""
    source = '''\
import torch
from trainer import Trainer


def evaluate(model, loader):
    with torch.no_grad():
        return sum(model(x).sum().item() for x in loader)


def on_epoch_end(trainer):
    torch.save({"optimizer": trainer.optimizer.state_dict()}, "last.pt")


def on_start(trainer):
    trainer.optimizer.load_state_dict(torch.load("last.pt")["optimizer"])
'''
    findings = [f for f in rewrite_source(source.encode(), Options()).findings]
    assert [(f.code, f.line) for f in findings if f.code in ("AMP126", "AMP227")] == [
        ("AMP126", 11), ("AMP227", 15)], findings


def test_optimizer_states_in_a_list_are_reported_where_no_entry_can_join() -> None:
    source = '''\
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
'''
    findings = [f.format("t.py") for f in rewrite_source(source.encode(), Options()).findings]
    assert ("t.py:11:28: AMP126 the optimizer's state is saved inside a container no scaler "
            "entry can join: save `scaler.state_dict()` in this checkpoint by hand") in findings


def test_a_two_step_optimizer_stays_fp32_and_says_why() -> None:
    """SAM: `first_step` reads the gradients to perturb the weights, `second_step` steps the
    base optimizer; a scaler can drive neither."""
    source = '''\
import torch
from sam import SAM

model = torch.nn.Linear(4, 2)
optimizer = SAM(model.parameters(), torch.optim.SGD, lr=0.1)
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.first_step(zero_grad=True)
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.second_step(zero_grad=True)
'''
    result = rewrite_source(source.encode(), Options())
    assert not result.changed
    codes = [f.code for f in result.findings]
    assert codes.count("AMP216") == 2 and "AMP201" in codes


def test_a_loss_from_a_capitalised_criterion_is_a_tensor() -> None:
    """`self.BCE_loss(...)` calls an instance, not a class: its result is a loss to scale."""
    source = '''\
import torch
import torch.nn as nn


class GAN:
    def __init__(self):
        self.G = nn.Linear(4, 8)
        self.G_optimizer = torch.optim.Adam(self.G.parameters())
        self.BCE_loss = nn.BCEWithLogitsLoss()

    def train(self, z):
        self.G_optimizer.zero_grad()
        G_loss = self.BCE_loss(self.G(z), torch.ones(len(z), 8))
        G_loss.backward()
        self.G_optimizer.step()
'''
    output = rewrite_source(source.encode(), Options()).source.decode()
    assert "self.scaler.scale(G_loss).backward()" in output


def test_a_step_fed_by_a_backward_left_alone_is_left_alone() -> None:
    """Through the scaler, true gradients would be divided by the scale: silent no-learning."""
    source = '''\
import torch

model = torch.nn.Linear(4, 2)
critic = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
c_optimizer = torch.optim.SGD(critic.parameters(), lr=0.1)
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y, reduction="none")
    loss.backward(torch.ones_like(loss))
    optimizer.step()
    c_loss = critic(x).pow(2).mean()
    c_loss.backward()
    c_optimizer.step()
'''
    result = rewrite_source(source.encode(), Options())
    output = result.source.decode()
    assert "    optimizer.step()\n" in output and "scaler.step(c_optimizer)" in output
    assert ("t.py:10:5: AMP205 `optimizer.step()` steps the gradients of a backward pass left "
            "unscaled; left unchanged") in [f.format("t.py") for f in result.findings]


@pytest.mark.parametrize("critic", ["losses.critic(netD, x)", "netD(x).mean()"])
def test_every_backward_feeding_a_step_is_scaled_or_none_is(critic: str) -> None:
    """A WGAN-GP critic: a seeded backward the analysis cannot place (its tensor comes from
    another module) before the penalty's plain one. Scaling only the penalty would divide the
    critic's true gradients by the scale: the step stays FP32 with all its backwards, while a
    critic output it recognises is scaled with the penalty."""
    source = f'''\
import torch
import losses

netD = torch.nn.Linear(2, 1)
netG = torch.nn.Linear(4, 2)
optD = torch.optim.SGD(netD.parameters(), lr=0.1)
optG = torch.optim.SGD(netG.parameters(), lr=0.1)
mone = torch.tensor(-1.0)
for x, z in loader:
    optD.zero_grad()
    d_real = {critic}
    d_real.backward(mone)
    gp = losses.penalty(netD, x, netG(z).detach())
    gp.backward()
    optD.step()
    optG.zero_grad()
    g = -netD(netG(z)).mean()
    g.backward()
    optG.step()
'''
    result = rewrite_source(source.encode(), Options())
    output = result.source.decode()
    findings = [f.format("t.py") for f in result.findings]
    assert "scaler.scale(g).backward()" in output and "scaler.step(optG)" in output
    if critic.startswith("losses."):
        assert "    gp.backward()\n    optD.step()\n" in output
        assert ("t.py:15:5: AMP205 `optD.step()` steps the gradients of a backward pass left "
                "unscaled; left unchanged") in findings
        assert ("t.py:14:5: AMP201 `gp.backward()` feeds an optimizer step left unchanged; left "
                "unchanged") in findings
    else:
        assert "scaler.scale(d_real).backward(mone)" in output
        assert "scaler.scale(gp).backward()" in output and "scaler.step(optD)" in output


def test_an_unseen_manual_update_in_the_other_branch_keeps_the_step_fp32() -> None:
    source = '''\
import torch
from d2l import sgd


def train(net, X, y, loss, params=None, lr=None, optimizer=None):
    for epoch in range(5):
        l = loss(net(X), y).sum()
        l.backward()
        if optimizer is None:
            sgd(params, lr, len(y))
        else:
            optimizer.step()
'''
    result = rewrite_source(source.encode(), Options())
    assert not result.changed
    assert ("t.py:10:13: AMP211 `sgd(params, lr, len(y))` may use the gradients on a path where "
            "no optimizer step can unscale them (a manual update); training step left "
            "unchanged") in [f.format("t.py") for f in result.findings]


def test_a_loss_computed_on_the_backward_line_says_so() -> None:
    source = '''\
import torch

model = torch.nn.Linear(2, 2)
optimizer = torch.optim.SGD(model.parameters(), 0.1)
for x in loader:
    optimizer.zero_grad(); loss = model(x).pow(2).mean(); loss.backward(); optimizer.step()
'''
    findings = [f.format("t.py") for f in rewrite_source(source.encode(), Options()).findings]
    assert ("t.py:6:59: AMP203 the loss is computed on the same line as its backward (`;`): put "
            "the forward pass on a line of its own to have it autocast; it stays FP32") in findings


def test_a_product_with_a_buffer_the_forward_updates_is_reported() -> None:
    """VQ-VAE's EMA codebook: never-used codes grow past float16's range (NaN in float16)."""
    source = '''\
import torch
from torch import nn


class Quantize(nn.Module):
    def __init__(self, dim, n_embed):
        super().__init__()
        self.register_buffer("embed", torch.randn(dim, n_embed))
        self.register_buffer("embed_avg", torch.randn(dim, n_embed))

    def forward(self, flatten):
        dist = -2 * flatten @ self.embed
        index = dist.argmin(1)
        self.embed.data.copy_(self.embed_avg / 2)
        return index
'''
    findings = [f.format("t.py") for f in rewrite_source(source.encode(), Options()).findings]
    assert any(f.startswith("t.py:12:16: AMP147 `self.embed` is a buffer this forward updates")
               for f in findings), findings


def test_module_methods_that_run_no_forward_are_not_reported_as_fp32_forwards() -> None:
    """`model.get_parameter(name)` and the other methods of `nn.Module` (and of Hugging Face
    models) inspect, move or register: no forward pass runs, so no AMP215."""
    source = '''\
import torch
import torch.nn.functional as F


def train(model, optimizer, loader):
    for x, y in loader:
        before = model.get_parameter("weight").clone()
        model.get_submodule("").register_forward_pre_hook(hook)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print((model.get_parameter("weight") - before).norm(), model.get_buffer("b"))


model = torch.nn.Linear(8, 3)
train(model, torch.optim.SGD(model.parameters(), lr=0.1), loader)
'''
    result = rewrite_source(source.encode(), Options())
    assert result.changed
    assert not [f for f in result.findings if f.code == "AMP215"], result.findings


def test_forwards_a_region_runs_are_not_reported_as_fp32() -> None:
    """A critic helper called only inside the training step's region, and the model calls of
    a loss computed inline on the backward line of a method, run under autocast: no AMP217,
    no AMP215."""
    source = '''\
import torch

netD = torch.nn.Linear(2, 1)
netG = torch.nn.Linear(4, 2)
optD = torch.optim.SGD(netD.parameters(), lr=0.1)


def critic(x):
    return netD(x).mean()


class Trainer:
    def __init__(self):
        self.optG = torch.optim.SGD(netG.parameters(), lr=0.1)

    def step(self, z):
        self.optG.zero_grad()
        (-netD(netG(z))).mean().backward()
        self.optG.step()


trainer = Trainer()
for x, z in loader:
    optD.zero_grad()
    d = critic(x)
    d.backward()
    optD.step()
    trainer.step(z)
'''
    result = rewrite_source(source.encode(), Options())
    output = result.source.decode()
    assert "    with autocast():\n        d = critic(x)\n" in output
    assert "with autocast():\n            loss = (-netD(netG(z))).mean()\n" in output
    assert not [f for f in result.findings if f.code in ("AMP215", "AMP217")], result.findings


LEARNER = '''\
import torch


class Learner:
    def __init__(self, model, data):
        self.model, self.data = model, data
        self.opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def one_batch(self, x, y):
        self.loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.backward(); self.step()
        self.zero_grad()

    def fit(self):
        for x, y in self.data:
            self.one_batch(x, y)
{methods}

learn = Learner(torch.nn.Linear(4, 2), loader)
learn.fit()
learn.zero_grad(); learn.step()
'''
KEEPING = '''

    def backward(self):
        self.loss.backward()

    def step(self):
        self.opt.step()

    def zero_grad(self):
        self.opt.zero_grad()


class MomentumLearner(Learner):
    def zero_grad(self):
        for p in self.model.parameters():
            p.grad.mul_(0.9)
'''


def test_a_learner_that_zeroes_and_steps_itself_is_no_optimizer() -> None:
    """`self.zero_grad()` and `self.step()` (dispatched by `__getattr__` to callbacks), or
    `learn.zero_grad(); learn.step()` of a Learner instance: never `scaler.step(self)`."""
    result = rewrite_source(LEARNER.format(methods="").encode(), Options())
    output = result.source.decode()
    assert "scaler.step(self)" not in output and "scaler.step(learn)" not in output
    assert ("t.py:11:26: AMP202 `self.step()`: receiver not recognised as an optimizer; left "
            "unchanged") in [f.format("t.py") for f in result.findings]


def test_a_step_a_subclass_runs_with_gradients_it_keeps_stays_fp32() -> None:
    """`MomentumLearner` inherits `step` and `backward` and keeps a share of the gradients in
    its `zero_grad`: the inherited step and the backward stay FP32 (a scaled backward before a
    plain step would apply gradients times the scale)."""
    result = rewrite_source(LEARNER.format(methods=KEEPING).encode(), Options())
    assert "scaler" not in result.source.decode()
    findings = [f.format("t.py") for f in result.findings]
    assert ("t.py:23:9: AMP226 `self.opt.step()` adds to the gradients `zero_grad()` keeps (it "
            "writes `.grad` instead of zeroing it), which a scaler would divide by the scale "
            "again; left unchanged") in findings
    assert ("t.py:20:9: AMP201 `self.loss.backward()` feeds an optimizer step left unchanged; "
            "left unchanged") in findings


@pytest.mark.parametrize(("metric", "autocast"), [
    ("self.losses.append(self.loss.item())", True),
    ("self.hits += (self.preds.argmax(1) == self.y).sum().item()", True),
    ("self.seen.append(self.preds.detach().numpy())", False),
])
def test_stored_predictions_are_autocast_only_where_nothing_else_reads_them(
    metric: str, autocast: bool
) -> None:
    """A Learner's `predict` and `get_loss` store what `backward` reads: they run under
    autocast unless another method reads the low-precision values (numpy has no bfloat16)."""
    source = f'''\
import torch


class Learner:
    def __init__(self, model):
        self.model = model
        self.opt = torch.optim.SGD(model.parameters(), lr=0.1)
        self.losses, self.seen, self.hits = [], [], 0

    def predict(self):
        self.preds = self.model(self.x)

    def get_loss(self):
        self.loss = torch.nn.functional.cross_entropy(self.preds, self.y)

    def backward(self):
        self.loss.backward()

    def after_step(self):
        {metric}

    def fit(self, data):
        for self.x, self.y in data:
            self.predict()
            self.get_loss()
            self.backward()
            self.opt.step()
            self.opt.zero_grad()
            self.after_step()
'''
    output = rewrite_source(source.encode(), Options()).source.decode()
    assert "self.scaler.scale(self.loss).backward()" in output
    assert ("with autocast():\n            self.preds = self.model(self.x)" in output) is autocast


def test_an_update_after_each_step_keeps_no_unscale_across_it() -> None:
    """`update()` after each step serves an optimizer stepped twice per iteration, but not
    where it would fall between an optimizer's `unscale_` and its step (torch forgets the
    unscale, and the step would divide the gradients by the scale again)."""
    source = '''\
import torch

model = torch.nn.Linear(4, 2)
head = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
head_opt = torch.optim.SGD(head.parameters(), lr=0.1)
for i, (x, y) in enumerate(loader):
    opt.zero_grad()
    head_opt.zero_grad()
    loss = head(model(x)).pow(2).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    head_opt.step()
    opt.step()
    if i % 4 == 0:
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
'''
    result = rewrite_source(source.encode(), Options())
    assert not result.changed
    assert any(f.code == "AMP210" for f in result.findings), result.findings


def test_a_backward_whose_step_is_left_alone_names_that_step() -> None:
    """AMP201 does not say "no optimizer step in this file" when there is one it leaves
    alone: it names it (its own finding says why)."""
    source = '''\
import torch

nets = {"g": torch.nn.Linear(4, 2)}
optims = {"g": torch.optim.Adam(nets["g"].parameters())}
for x in loader:
    loss = nets["g"](x).pow(2).mean()
    loss.backward()
    registry.lookup("g").step()
'''
    findings = [f.format("t.py") for f in rewrite_source(source.encode(), Options()).findings]
    assert findings[:2] == [
        "t.py:7:5: AMP201 `loss.backward()` feeds no optimizer step the rewrite can route "
        "(`registry.lookup(\"g\").step()` is left unchanged, as its finding says); left unchanged",
        "t.py:8:5: AMP202 `registry.lookup(\"g\").step()`: receiver not recognised as an "
        "optimizer; left unchanged"], findings


@pytest.mark.parametrize(("demo", "left_alone"), [
    # gradient descent by hand, then the optimizer's training: the demo is no training step
    ("for i in range(5):\n    l = (w * 3).pow(2).sum()\n    l.backward()\n"
     "    with torch.no_grad():\n        w -= 0.1 * w.grad\n        w.grad.zero_()\n", True),
    ("(w * 3).sum().backward()\nprint(w.grad)\n", True),
    # micro-batches whose gradients a step after the loop applies: they feed that step
    ("for micro in chunks:\n    model(micro).sum().backward()\n    print(w.grad)\n"
     "optimizer.step()\n", False),
])
def test_a_module_level_backward_read_and_never_stepped_is_no_training_step(
    demo: str, left_alone: bool
) -> None:
    source = f"""\\
import torch

w = torch.zeros(3, requires_grad=True)
model = torch.nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
{demo}
for x in loader:
    optimizer.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
"""
    result = rewrite_source(source.encode(), Options())
    demo_lines = range(6, 6 + demo.count("\n"))
    read = [f for f in result.findings if f.code == "AMP201" and f.line in demo_lines]
    assert bool(read) is left_alone, result.findings
    assert ("scaler.scale(loss).backward()" in result.source.decode()) is left_alone


def test_a_backward_stepped_by_another_modules_wrapper_says_which_call_steps_it() -> None:
    """A scheduled optimizer wrapper of another module steps the optimizer in its
    `step_and_update_lr()`: the rewrite does not route a step through it, and says so."""
    source = '''\
import torch
from transformer.Optim import ScheduledOptim

model = torch.nn.Linear(4, 2)
optimizer = ScheduledOptim(torch.optim.Adam(model.parameters()), 2.0, 64, 4000)
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step_and_update_lr()
'''
    findings = [f.format("t.py") for f in rewrite_source(source.encode(), Options()).findings]
    assert ("t.py:9:5: AMP201 `loss.backward()` has no optimizer step in this file: if "
            "`optimizer.step_and_update_lr()` steps one (a method of an object from another "
            "module), the rewrite does not route a step through it; left unchanged") in findings
