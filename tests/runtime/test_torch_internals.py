"""The private torch APIs the runtime relies on (`torch_internals`), and its fallbacks.

The first tests assert that each private API is still there, shaped as the runtime expects.
A torch release that changes one fails them loudly, while the runtime falls back on public
API silently (the fallbacks are tested below): look at torch_internals.py then.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
import torch
from amprewrite_runtime import GradScaler, autocast, torch_internals
from amprewrite_runtime.scaler import _TORCH_KEYS
from torch import nn

CHANGED = "torch {} changed {}: amprewrite_runtime falls back to public API; see torch_internals.py"


def _changed(what: str) -> str:
    return CHANGED.format(torch.__version__, what)


def _scaled_step(scaler: torch.amp.GradScaler, overflow: bool) -> torch.optim.Optimizer:
    param = nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([param], lr=0.1)
    scaler.scale(param.sum()).backward()
    if overflow:
        param.grad[0] = float("inf")
    scaler.step(optimizer)
    return optimizer


# The private APIs -------------------------------------------------------------------------
@pytest.mark.parametrize("overflow", [False, True])
def test_torch_keeps_found_inf_flags_per_optimizer_until_update(overflow: bool) -> None:
    scaler = torch.amp.GradScaler("cpu")
    optimizer = _scaled_step(scaler, overflow)
    states = getattr(scaler, "_per_optimizer_states", None)
    assert isinstance(states, Mapping), _changed("GradScaler._per_optimizer_states")
    flags = states.get(id(optimizer), {}).get("found_inf_per_device")
    assert isinstance(flags, Mapping) and list(flags) == [torch.device("cpu")], _changed(
        "GradScaler._per_optimizer_states[id(optimizer)]['found_inf_per_device']")
    assert all(isinstance(flag, torch.Tensor) for flag in flags.values())
    found = torch_internals.found_inf(scaler, optimizer)
    assert isinstance(found, torch.Tensor) and found.dtype == torch.bool
    assert bool(found) is overflow


def test_torch_unscales_through_an_overridable_unscale_grads() -> None:
    assert torch_internals.unscales_low_precision(), _changed(
        f"GradScaler._unscale_grads_{torch_internals.UNSCALE_GRADS_PARAMETERS}")
    param = nn.Parameter(torch.ones(2, dtype=torch.float16))
    optimizer = torch.optim.SGD([param], lr=0.1)
    for kind in (torch.amp.GradScaler, torch_internals.AnyPrecisionGradScaler):
        scaler = kind("cpu", init_scale=4.0)
        scaler.scale(torch.tensor(1.0))
        param.grad = torch.full_like(param, 8.0)
        if kind is torch.amp.GradScaler:  # should torch stop refusing, the override can go
            with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
                scaler.unscale_(optimizer)
        else:
            scaler.unscale_(optimizer)
            assert param.grad.tolist() == [2.0, 2.0], _changed("GradScaler.unscale_")


def test_torch_batchnorms_share_a_base_class() -> None:
    base = getattr(nn.modules.batchnorm, "_BatchNorm", None)
    assert torch_internals.batchnorm_types() == (base,), _changed(
        "torch.nn.modules.batchnorm._BatchNorm")


def test_torch_scaler_state_has_the_keys_the_runtime_maps() -> None:
    assert set(torch.amp.GradScaler("cpu").state_dict()) == set(_TORCH_KEYS.values())


# The fallbacks ----------------------------------------------------------------------------
def test_unreadable_flags_are_reported_as_unknown() -> None:
    scaler = torch.amp.GradScaler("cpu")
    optimizer = _scaled_step(scaler, overflow=True)
    scaler._per_optimizer_states = {id(optimizer): {"found_inf": torch.tensor(1.0)}}
    assert torch_internals.found_inf(scaler, optimizer) is None
    del scaler._per_optimizer_states
    assert torch_internals.found_inf(scaler, optimizer) is None


@pytest.mark.parametrize(("loss_scale", "scales"), [(None, [2.0**16, 2.0**15, 2.0**15]),
                                                     (128.0, [128.0, 128.0, 128.0])])
def test_without_the_flags_skips_are_told_by_update(
    monkeypatch: pytest.MonkeyPatch, loss_scale: float | None, scales: list[float]
) -> None:
    monkeypatch.setattr(torch_internals, "found_inf", lambda scaler, optimizer: None)
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = GradScaler(dtype="float16", loss_scale=loss_scale)
    skipped, seen = [], [scaler.get_scale()]
    for step in range(2):
        optimizer.zero_grad()
        with autocast():
            loss = model(torch.randn(2, 4)).float().mean()  # float16 gradients that fit
        scaler.scale(loss).backward()
        if step == 0:
            model.weight.grad[0, 0] = float("inf")
        weight = model.weight.detach().clone()
        scaler.step(optimizer)
        scaler.update()
        skipped.append(scaler.last_step_skipped)
        seen.append(scaler.get_scale())
        assert torch.equal(weight, model.weight) == scaler.last_step_skipped
    assert skipped == [True, False] and scaler.skipped_steps == 1
    assert seen == scales


def test_a_changed_unscale_grads_is_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    def renamed(self, optimizer, inv_scale, found_inf, allow_low_precision):  # type: ignore[no-untyped-def]
        raise AssertionError("never called")

    monkeypatch.setattr(torch.amp.GradScaler, "_unscale_grads_", renamed)
    assert not torch_internals.unscales_low_precision.__wrapped__()
    monkeypatch.delattr(torch.amp.GradScaler, "_unscale_grads_")
    assert not torch_internals.unscales_low_precision.__wrapped__()


def test_without_it_o3_in_float16_keeps_master_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch_internals, "unscales_low_precision", lambda: False)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = GradScaler("O3", dtype="float16")
    with pytest.warns(RuntimeWarning, match="O3 keeps float32 master weights"):
        scaler.initialize(model, optimizer)
    assert model[0].weight.dtype == torch.float16
    assert all(p.dtype == torch.float32 for p in scaler.master_params(optimizer))
    x = torch.randn(32, 8)
    y = x.sum(dim=1, keepdim=True)
    losses = []
    for _ in range(10):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    assert type(scaler._scaler) is torch.amp.GradScaler
    assert losses[-1] < 0.5 * losses[0]


def test_without_the_base_class_the_public_batchnorms_are_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(nn.modules.batchnorm, "_BatchNorm")
    assert torch_internals.batchnorm_types() == torch_internals.PUBLIC_BATCHNORMS
