"""The runtime GradScaler: pass-through where scaling does not help, real scaling in float16,
skipped steps, and checkpoints that round-trip exactly."""

from __future__ import annotations

import io
import warnings

import pytest
import torch
from amprewrite_runtime import GradScaler, autocast, policy
from torch import nn


def _model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.05)


def _train(scaler: GradScaler, steps: int = 30) -> list[float]:
    model, optimizer = _model_and_optimizer()
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        with autocast():
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    return losses


def test_bfloat16_on_the_cpu_needs_no_scaling() -> None:
    scaler = GradScaler()
    loss = torch.tensor(2.0)
    assert scaler.scale(loss) is loss
    assert not scaler.is_enabled()
    losses = _train(scaler)
    assert losses[-1] < losses[0] * 0.8


def test_float16_scales_and_trains() -> None:
    scaler = GradScaler(dtype="float16")
    assert scaler.scale(torch.tensor(2.0)).item() == 2.0 * 2**16
    assert scaler.is_enabled()
    losses = _train(GradScaler(dtype="float16"))
    assert losses[-1] < losses[0] * 0.8


def test_nested_outputs_are_scaled_like_torch() -> None:
    scaler = GradScaler(dtype="float16")
    a, b, c = torch.tensor(1.0), torch.tensor(2.0), torch.tensor(3.0)
    scaled = scaler.scale([a, (b, c)])
    assert isinstance(scaled, list) and isinstance(scaled[1], tuple)
    values = [scaled[0].item(), scaled[1][0].item(), scaled[1][1].item()]
    assert values == [2.0**16, 2.0**17, 3 * 2.0**16]
    generated = scaler.scale(t for t in (a, b))
    assert [t.item() for t in generated] == [2.0**16, 2.0**17]


def test_a_generator_creates_the_scaler_without_being_consumed() -> None:
    scaler = GradScaler(dtype="float16")
    assert [t.item() for t in scaler.scale(t for t in (torch.tensor(1.0),))] == [2.0**16]
    assert scaler.is_enabled()


def test_step_before_any_scale_just_steps() -> None:
    model, optimizer = _model_and_optimizer()
    model(torch.randn(4, 8)).sum().backward()
    before = next(model.parameters()).detach().clone()
    scaler = GradScaler(dtype="float16")
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    assert not torch.equal(before, next(model.parameters()))
    assert not scaler.last_step_skipped and scaler.skipped_steps == 0
    assert scaler.state_dict()["scale"] == 2.0**16


def test_o0_steps_plainly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(policy.ENV_OPT_LEVEL, "O0")
    policy.reset_policy()
    scaler = GradScaler(dtype="float16")
    loss = torch.tensor(3.0)
    assert scaler.scale(loss) is loss and not scaler.is_enabled()
    assert scaler.get_scale() == 1.0
    model, optimizer = _model_and_optimizer()
    model(torch.randn(4, 8)).sum().backward()
    before = next(model.parameters()).detach().clone()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    assert not torch.equal(before, next(model.parameters()))



def test_an_overflow_skips_the_step_and_halves_the_scale() -> None:
    model, optimizer = _model_and_optimizer()
    scaler = GradScaler(dtype="float16")
    before = [p.detach().clone() for p in model.parameters()]
    loss = model(torch.randn(4, 8)).sum()
    scaler.scale(loss).backward()
    next(model.parameters()).grad[0, 0] = float("inf")
    scaler.step(optimizer)
    scaler.update()
    assert scaler.last_step_skipped and scaler.skipped_steps == 1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert scaler.get_scale() == 2.0**15
    optimizer.zero_grad()
    scaler.scale(model(torch.randn(4, 8)).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
    assert not scaler.last_step_skipped and scaler.skipped_steps == 1


def test_state_round_trips_before_first_use() -> None:
    scaler = GradScaler(init_scale=1024.0)
    state = scaler.state_dict()
    fresh = GradScaler()
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state


def test_state_round_trips_after_training_through_torch_save() -> None:
    scaler = GradScaler(dtype="float16", growth_interval=3)
    _train(scaler, steps=7)
    state = scaler.state_dict()
    buffer = io.BytesIO()
    torch.save({"scaler": state}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)["scaler"]
    resumed = GradScaler(dtype="float16", growth_interval=3)
    resumed.load_state_dict(loaded)
    assert resumed.state_dict() == state
    resumed.scale(torch.tensor(1.0))  # the torch scaler is created with the loaded state
    assert resumed.get_scale() == state["scale"]
    assert resumed.state_dict() == state
    assert state["growth_tracker"] == 7 % 3 and state["scale"] == 2.0**18
    assert all(type(value) in (str, int, float) for value in state.values())


@pytest.mark.parametrize("empty", [None, {}])
def test_loading_nothing_keeps_the_state(empty: dict | None) -> None:
    scaler = GradScaler()
    state = scaler.state_dict()
    scaler.load_state_dict(empty)
    assert scaler.state_dict() == state


def test_loads_a_native_torch_scaler_state() -> None:
    native = torch.amp.GradScaler("cpu", init_scale=512.0)
    native.scale(torch.tensor(1.0))
    scaler = GradScaler(dtype="float16")
    scaler.load_state_dict(native.state_dict())
    assert scaler.state_dict()["scale"] == 512.0
    scaler.scale(torch.tensor(1.0))
    assert scaler.get_scale() == 512.0
    assert scaler.state_dict()["opt_level"] == "O1"


def test_loading_another_opt_level_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    state = GradScaler().state_dict()
    monkeypatch.setenv(policy.ENV_OPT_LEVEL, "O0")
    policy.reset_policy()
    scaler = GradScaler()
    with pytest.warns(UserWarning, match="O1 into one running at O0"):
        scaler.load_state_dict(state)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaler.load_state_dict(scaler.state_dict())


@pytest.mark.parametrize(
    ("arguments", "passes_through"),
    [({}, True), ({"dtype": "float16"}, False), ({"loss_scale": 128.0}, False),
     ({"opt_level": "O2"}, False), ({"opt_level": "O0"}, True)],
)
def test_only_a_scaler_with_nothing_to_do_passes_straight_through(
    arguments: dict, passes_through: bool
) -> None:
    """The fast path (bfloat16 or FP32 on the CPU) still trains exactly like the full one."""
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = GradScaler(**arguments)
    scaler.initialize(model, optimizer)
    before = model.weight.detach().clone()
    loss = model(torch.randn(8, 4).to(model.weight.dtype)).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    assert scaler._passthrough is passes_through
    assert not torch.equal(model.weight.detach(), before)  # the optimizer stepped
    assert not scaler.last_step_skipped and scaler.skipped_steps == 0


def test_a_float16_step_reads_the_device_no_more_often_than_torchs_scaler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found on an H200 (docs/benchmarks.md, issue 27): reading torch's found-inf flag after
    `scaler.step()` made the host wait for the optimizer step it had just queued, once a
    step, where torch's own scaler reads only before it (a launch-bound MLP ran 5% slower
    than by hand). The flags stay on the device until `last_step_skipped` or
    `skipped_steps` is read. Host reads are counted as `.item()`/`.tolist()` calls."""
    reads = []
    for name in ("item", "tolist"):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, _o=original, _n=name: (
            reads.append(_n), _o(self))[1])

    def steps(scale, step, update) -> int:
        model, optimizer = _model_and_optimizer()
        x, y = torch.randn(64, 8), torch.randn(64, 1)
        reads.clear()
        for _ in range(5):
            optimizer.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = torch.nn.functional.mse_loss(model(x).float(), y)
            scale(loss).backward()
            step(optimizer)
            update()
        return len(reads)

    ours = GradScaler(dtype="float16")
    theirs = torch.amp.GradScaler("cpu")
    assert steps(ours.scale, ours.step, ours.update) == steps(
        theirs.scale, theirs.step, theirs.update) == 5
    assert ours.skipped_steps == 0 and not ours.last_step_skipped


@pytest.mark.parametrize("read_between", [False, True])
def test_skips_of_two_optimizers_are_counted_each_once(read_between: bool) -> None:
    """The flags kept on the device are snapshots: torch's `update()` adds the second
    optimizer's found-inf flag into the first one's in place, which must not turn the
    first optimizer's good step into a skipped one when read later."""
    first, second = nn.Parameter(torch.ones(2)), nn.Parameter(torch.ones(2))
    optimizers = [torch.optim.SGD([first], lr=0.1), torch.optim.SGD([second], lr=0.1)]
    scaler = GradScaler(dtype="float16")
    seen = []
    for overflow_in_second in (True, False, True):
        scaler.scale((first + second).sum()).backward()
        if overflow_in_second:
            second.grad[0] = float("inf")
        for optimizer in optimizers:
            scaler.step(optimizer)
            if read_between:
                seen.append(scaler.last_step_skipped)
        scaler.update()
        seen.append(scaler.last_step_skipped)
        for optimizer in optimizers:
            optimizer.zero_grad()
    expected = [False, True, True, False, False, False, False, True, True]
    assert seen == (expected if read_between else expected[2::3])
    assert scaler.skipped_steps == 2
    assert first.tolist() != [1.0, 1.0]  # the first optimizer stepped every time


def test_state_dict_changes_nothing() -> None:
    """Nothing but reading the skip flags the steps left on the device (which any read of
    `skipped_steps` does: one sync, then they are plain numbers)."""
    scaler = GradScaler(dtype="float16", growth_interval=3)
    _train(scaler, steps=4)
    assert scaler._unread_skips is not None  # the steps read none of them
    skipped = scaler.skipped_steps
    before = dict(vars(scaler))
    scaler.state_dict()
    assert vars(scaler).keys() == before.keys()
    assert all(vars(scaler)[name] is value for name, value in before.items())
    assert scaler.state_dict()["skipped_steps"] == skipped


def test_a_partial_state_keeps_the_current_scale() -> None:
    scaler = GradScaler(dtype="float16", growth_interval=3)
    _train(scaler, steps=4)
    assert scaler.get_scale() == 2.0**17
    scaler.load_state_dict({"skipped_steps": 5})
    state = scaler.state_dict()
    assert (state["scale"], state["growth_tracker"], state["skipped_steps"]) == (2.0**17, 1, 5)
