"""The training step exactly as rewritten scripts write it: autocast, scale, unscale_, clip,
step, update, and a scheduler guarded by `last_step_skipped`."""

from __future__ import annotations

import pytest
import torch
from amprewrite_runtime import GradScaler, autocast, policy
from torch import nn


def _setup() -> tuple[nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.StepLR]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    return model, optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(64, 8, generator=generator)
    return x, x.sum(dim=1, keepdim=True)


def _linear_dtypes(model: nn.Module) -> list[torch.dtype]:
    seen: list[torch.dtype] = []
    for module in model.modules():
        if isinstance(module, nn.Linear):
            module.register_forward_hook(lambda _m, _i, out: seen.append(out.dtype))
    return seen


def _run(scaler: GradScaler, steps: int, overflow_at: int | None = None):  # type: ignore[no-untyped-def]
    model, optimizer, scheduler = _setup()
    seen = _linear_dtypes(model)
    x, y = _data()
    losses, skipped, scheduler_steps = [], [], 0
    for step in range(steps):
        optimizer.zero_grad()
        with autocast():
            output = model(x)
            loss = nn.functional.mse_loss(output.float(), y)
        scaler.scale(loss).backward()
        if step == overflow_at:
            model[0].weight.grad[0, 0] = float("inf")
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        before = [p.detach().clone() for p in model.parameters()]
        scaler.step(optimizer)
        scaler.update()
        if not scaler.last_step_skipped:
            scheduler.step()
            scheduler_steps += 1
        unchanged = all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
        assert unchanged == scaler.last_step_skipped
        losses.append(loss.item())
        skipped.append(scaler.last_step_skipped)
    return losses, skipped, scheduler_steps, seen, optimizer


@pytest.mark.parametrize(
    ("dtype", "expected", "scaled"),
    [(None, torch.bfloat16, False), ("bfloat16", torch.bfloat16, False),
     ("float16", torch.float16, True)],
)
def test_rewritten_step_trains(dtype: str | None, expected: torch.dtype, scaled: bool) -> None:
    scaler = GradScaler(dtype=dtype)
    losses, skipped, scheduler_steps, seen, _ = _run(scaler, steps=20)
    assert set(seen) == {expected}
    assert scaler.is_enabled() is scaled
    assert scheduler_steps == skipped.count(False) == 20 - scaler.skipped_steps
    assert scaled or not any(skipped)  # float16 may skip while the scale calibrates
    assert losses[-1] < 0.3 * losses[0]


def test_an_overflow_skips_the_step_and_the_scheduler() -> None:
    scaler = GradScaler(dtype="float16")
    _, skipped, scheduler_steps, _, optimizer = _run(scaler, steps=4, overflow_at=1)
    assert skipped == [False, True, False, False]
    assert scaler.skipped_steps == 1 and scheduler_steps == 3
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05 * 0.9**3)
    assert scaler.get_scale() == 2.0**15
    assert scaler.state_dict()["skipped_steps"] == 1


def test_unscale_gives_the_gradients_of_the_unscaled_loss() -> None:
    x, y = _data()
    grads = []
    for scaler in (GradScaler(dtype="float16"), None):
        model, optimizer, _ = _setup()
        with autocast(dtype="float16"):
            loss = nn.functional.mse_loss(model(x).float(), y)
        if scaler is None:
            loss.backward()
        else:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    scaled, plain = grads
    assert scaled.dtype == torch.float32
    torch.testing.assert_close(scaled, plain, rtol=1e-3, atol=1e-4)


def test_o0_from_the_environment_runs_the_same_script_in_fp32(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(policy.ENV_OPT_LEVEL, "O0")
    policy.reset_policy()
    scaler = GradScaler(dtype="float16")
    losses, skipped, _, seen, _ = _run(scaler, steps=10)
    assert set(seen) == {torch.float32}
    assert not scaler.is_enabled() and scaler.get_scale() == 1.0
    assert not any(skipped) and losses[-1] < losses[0]
    assert scaler.state_dict()["opt_level"] == "O0"
