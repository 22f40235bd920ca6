"""Opt levels O0-O3 in the runtime: apex's properties on native torch."""

from __future__ import annotations

import io
import math

import pytest
import torch
from amprewrite_runtime import GradScaler, autocast
from torch import nn


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Linear(32, 1))


def _train(level: str, steps: int = 25, **overrides: object) -> tuple[list[float], nn.Module,
                                                                      torch.optim.Optimizer,
                                                                      GradScaler]:
    model = _net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = GradScaler(level, **overrides)  # type: ignore[arg-type]
    model, optimizer = scaler.initialize(model, optimizer)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(64, 8, generator=generator)
    y = x.sum(dim=1, keepdim=True)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        with autocast():
            loss = nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(scaler.master_params(optimizer), 10.0)
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    return losses, model, optimizer, scaler


@pytest.mark.parametrize("level", ["O0", "O1", "O2", "O3"])
def test_every_level_trains(level: str) -> None:
    overrides = {"keep_batchnorm_fp32": True} if level == "O3" else {}
    losses = _train(level, **overrides)[0]
    assert all(math.isfinite(loss) for loss in losses)
    assert losses[-1] < 0.5 * losses[0]


def test_o2_keeps_float32_masters_low_precision_weights_and_float32_batchnorm() -> None:
    _, model, optimizer, _ = _train("O2", steps=3)
    linear, batchnorm = model[0], model[1]
    assert linear.weight.dtype == torch.bfloat16
    assert batchnorm.weight.dtype == torch.float32
    stepped = list(optimizer.param_groups[0]["params"])
    assert all(p.dtype == torch.float32 for p in stepped)
    assert stepped[0] is not linear.weight
    # The model's weights are the masters, rounded.
    assert torch.equal(linear.weight, stepped[0].detach().to(torch.bfloat16))


def test_o2_model_outputs_float32_from_float32_inputs() -> None:
    _, model, _, _ = _train("O2", steps=1)
    assert model(torch.randn(4, 8)).dtype == torch.float32


def test_o3_casts_everything_and_keeps_no_masters() -> None:
    _, model, optimizer, _ = _train("O3", steps=2)
    assert model[1].weight.dtype == torch.bfloat16
    assert optimizer.param_groups[0]["params"][0] is model[0].weight


def test_o3_keep_batchnorm_fp32_is_the_speed_of_light_variant() -> None:
    _, model, _, _ = _train("O3", steps=2, keep_batchnorm_fp32=True)
    assert model[0].weight.dtype == torch.bfloat16 and model[1].weight.dtype == torch.float32


def test_o2_checkpoint_holds_float32_masters_and_restores_them() -> None:
    _, model, optimizer, _ = _train("O2", steps=5)
    state = model.state_dict()
    assert state["0.weight"].dtype == torch.float32
    assert torch.equal(state["0.weight"], optimizer.param_groups[0]["params"][0].detach())
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    fresh = _net()
    fresh_optimizer = torch.optim.SGD(fresh.parameters(), lr=0.05)
    GradScaler("O2").initialize(fresh, fresh_optimizer)
    fresh.load_state_dict(torch.load(buffer, weights_only=True))
    assert torch.equal(fresh_optimizer.param_groups[0]["params"][0].detach(), state["0.weight"])
    assert fresh[0].weight.dtype == torch.bfloat16
    # An FP32 model loads the same checkpoint at full precision.
    plain = _net()
    plain.load_state_dict(state)
    assert torch.equal(plain[0].weight, state["0.weight"])


def _overflowing_step(scaler: GradScaler, level: str) -> tuple[nn.Module, list[torch.Tensor]]:
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler.initialize(model, optimizer)
    weights = [p.detach().clone() for p in model.parameters()]
    with autocast():
        loss = model(torch.randn(2, 4)).float().sum()
    scaler.scale(loss).backward()
    model.weight.grad[0, 0] = float("inf")
    scaler.step(optimizer)
    scaler.update()
    return model, weights


@pytest.mark.parametrize("level", ["O1", "O2"])
def test_overflow_skips_the_step_and_halves_a_dynamic_scale(level: str) -> None:
    scaler = GradScaler(level, dtype="float16")
    model, weights = _overflowing_step(scaler, level)
    assert scaler.last_step_skipped and scaler.skipped_steps == 1
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters(), strict=True))
    assert scaler.get_scale() == 2.0**15


@pytest.mark.parametrize("level", ["O1", "O3"])
def test_overflow_with_a_static_scale_skips_and_keeps_the_scale(level: str) -> None:
    scaler = GradScaler(level, dtype="float16", loss_scale=128.0)
    model, weights = _overflowing_step(scaler, level)
    assert scaler.last_step_skipped
    assert all(torch.equal(a, b) for a, b in zip(weights, model.parameters(), strict=True))
    assert scaler.get_scale() == 128.0


def test_state_dict_carries_level_scale_and_skips() -> None:
    scaler = GradScaler("O2", dtype="float16")
    _overflowing_step(scaler, "O2")
    state = scaler.state_dict()
    assert state["opt_level"] == "O2" and state["skipped_steps"] == 1
    assert state["scale"] == 2.0**15


def test_o2_casts_with_hooks_and_replaces_no_method() -> None:
    _, model, optimizer, _ = _train("O2", steps=2)
    assert "forward" not in vars(model) and "zero_grad" not in vars(optimizer)
    seen: list[torch.dtype] = []
    model.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    model(torch.randn(4, 8))
    assert seen == [torch.float32]  # the model's hooks see what its caller gets


class _Shift(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3))
        self.seen: list[torch.dtype] = []

    def forward(self, x: torch.Tensor, *, shift: torch.Tensor, steps: int) -> torch.Tensor:
        self.seen += [x.dtype, shift.dtype]
        return x * self.weight + shift * steps


def test_o2_casts_keyword_inputs_and_leaves_other_values_alone() -> None:
    model = _Shift()
    GradScaler("O2").initialize(model, torch.optim.SGD(model.parameters(), lr=0.1))
    out = model(torch.randn(3), shift=torch.ones(3), steps=2)
    assert model.seen == [torch.bfloat16, torch.bfloat16] and out.dtype == torch.float32


def test_keep_batchnorm_fp32_keeps_its_exact_values() -> None:
    model = _net()
    batchnorm = model[1]
    with torch.no_grad():
        batchnorm.weight.uniform_(0.5, 1.5)  # values bfloat16 cannot hold
        batchnorm.running_mean.normal_()
    expected = {name: value.clone() for name, value in batchnorm.state_dict().items()}
    weight = batchnorm.weight
    GradScaler("O2").initialize(model, torch.optim.SGD(model.parameters(), lr=0.1))
    assert batchnorm.weight is weight  # the optimizer's reference still holds
    for name, value in batchnorm.state_dict().items():
        assert value.dtype == expected[name].dtype and torch.equal(value, expected[name])


def _losses_zeroing(zero_grad: str) -> list[float]:
    model = _net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = GradScaler("O2", dtype="float16")
    scaler.initialize(model, optimizer)
    x = torch.randn(16, 8, generator=torch.Generator().manual_seed(1))
    losses = []
    for _ in range(4):
        (model if zero_grad == "model" else optimizer).zero_grad()
        loss = nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
        assert all(p.grad is None for p in model.parameters() if p.dtype == torch.bfloat16)
    return losses


def test_o2_gradients_move_to_the_masters_whichever_zero_grad_the_script_calls() -> None:
    assert _losses_zeroing("model") == _losses_zeroing("optimizer")


def test_o2_without_initialize_warns_once_and_trains_the_uncast_model() -> None:
    """A step whose optimizer was built where no `initialize` could follow (another module
    the rewrite did not link) must not crash the run: it trains in float32 and says so."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = GradScaler("O2")
    before = model.weight.detach().clone()
    with pytest.warns(RuntimeWarning, match="never called") as warned:
        for _ in range(2):
            optimizer.zero_grad()
            scaler.scale(model(torch.randn(8, 4)).pow(2).mean()).backward()
            scaler.step(optimizer)
            scaler.update()
    assert len([w for w in warned if "never called" in str(w.message)]) == 1
    assert model.weight.dtype == torch.float32
    assert not torch.equal(model.weight, before)


@pytest.mark.parametrize(("level", "cast", "autocast_on"), [
    ("O0", False, False), ("O1", False, True), ("O2", True, False)])
def test_initialize_with_an_opt_level_sets_it_where_the_script_knows_it(
    level: str, cast: bool, autocast_on: bool
) -> None:
    """A migrated apex script: a module-level `GradScaler()` (O1) configured later by
    `initialize(model, optimizer, opt_level=...)`, where the script's flags are bound."""
    model = _net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = GradScaler()
    scaler.initialize(model, optimizer, opt_level=level, keep_batchnorm_fp32=True)
    assert scaler.opt_level == level
    assert (model[0].weight.dtype != torch.float32) == cast
    assert model[1].weight.dtype == torch.float32  # batchnorm kept FP32 where asked
    with autocast():
        assert torch.is_autocast_enabled("cpu") == autocast_on


def test_initialize_cannot_change_the_level_after_scaling() -> None:
    model = _net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = GradScaler()
    scaler.scale(model(torch.randn(4, 8)).sum()).backward()
    with pytest.raises(RuntimeError, match="before the first scale"):
        scaler.initialize(model, optimizer, opt_level="O2")


@pytest.mark.parametrize("level", ["O2", "O3"])
def test_one_optimizer_over_several_models_initializes_them_all(level: str) -> None:
    """`scaler.initialize([encoder, decoder], optimizer)`, as apex took a list of models and as
    the codemod writes for an optimizer over several models' parameters (cleanrl's SAC:
    `Adam(list(qf1.parameters()) + list(qf2.parameters()))`)."""
    torch.manual_seed(0)
    encoder, decoder = nn.Linear(8, 16), nn.Linear(16, 1)
    optimizer = torch.optim.Adam([*encoder.parameters(), *decoder.parameters()], lr=1e-2)
    scaler = GradScaler(level)
    models, _ = scaler.initialize([encoder, decoder], optimizer)
    assert models == [encoder, decoder]
    assert encoder.weight.dtype == decoder.weight.dtype == torch.bfloat16
    x = torch.randn(64, 8)
    y = x.sum(dim=1, keepdim=True)
    losses = []
    for _ in range(20):
        optimizer.zero_grad()
        with autocast():
            loss = nn.functional.mse_loss(decoder(torch.relu(encoder(x))), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    assert all(math.isfinite(loss) for loss in losses) and losses[-1] < 0.5 * losses[0]
    stepped = optimizer.param_groups[0]["params"]
    if level == "O2":  # float32 masters for both models, each model's checkpoint holds its own
        assert all(p.dtype == torch.float32 for p in stepped)
        assert torch.equal(encoder.state_dict()["weight"], stepped[0].detach())
        assert torch.equal(decoder.state_dict()["weight"], stepped[2].detach())
    else:
        assert stepped[0] is encoder.weight


class _Agent(nn.Module):
    """cleanrl's PPO agent: no `forward`, methods that call its networks."""

    def __init__(self) -> None:
        super().__init__()
        self.critic = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
        self.actor = nn.Linear(4, 2)

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x)

    def get_logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.actor(x)


@pytest.mark.parametrize("level", ["O2", "O3"])
def test_a_model_without_forward_gets_its_networks_inputs_cast(level: str) -> None:
    agent = _Agent()
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-2)
    GradScaler(level).initialize(agent, optimizer)
    x = torch.randn(8, 4)  # float32, as an environment's observations
    assert agent.critic[0].weight.dtype == torch.bfloat16
    assert agent.get_value(x).dtype == torch.float32
    assert agent.get_logits(x).dtype == torch.float32
