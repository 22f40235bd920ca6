"""The precision policy: defaults, environment overrides, clear errors."""

from __future__ import annotations

import pytest
import torch
from amprewrite_runtime import GradScaler, autocast, policy


def test_cpu_defaults_to_bfloat16_autocast() -> None:
    layer = torch.nn.Linear(4, 4)
    with autocast():
        out = layer(torch.randn(2, 4))
    assert out.dtype == torch.bfloat16


def test_o0_from_the_environment_disables_autocast(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(policy.ENV_OPT_LEVEL, "O0")
    policy.reset_policy()
    with autocast():
        out = torch.nn.Linear(4, 4)(torch.randn(2, 4))
    assert out.dtype == torch.float32


def test_dtype_from_the_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(policy.ENV_DTYPE, "float16")
    policy.reset_policy()
    with autocast(dtype="bfloat16"):
        out = torch.nn.Linear(4, 4)(torch.randn(2, 4))
    assert out.dtype == torch.float16


def test_explicit_dtype_beats_the_default() -> None:
    with autocast(dtype="float16"):
        out = torch.nn.Linear(4, 4)(torch.randn(2, 4))
    assert out.dtype == torch.float16


@pytest.mark.parametrize(
    ("variable", "value"),
    [(policy.ENV_OPT_LEVEL, "O4"), (policy.ENV_OPT_LEVEL, "o1"), (policy.ENV_DTYPE, "int8"),
     (policy.ENV_DTYPE, "float32"), (policy.ENV_DEVICE, "gpu")],
)
def test_invalid_environment_values_are_refused(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    policy.reset_policy()
    with pytest.raises(ValueError, match=variable):
        policy.current_policy()
    with pytest.raises(ValueError, match=variable):
        autocast()


def test_the_environment_is_read_once_until_reset(monkeypatch: pytest.MonkeyPatch) -> None:
    with autocast():
        assert torch.nn.Linear(4, 4)(torch.randn(2, 4)).dtype == torch.bfloat16
    monkeypatch.setenv(policy.ENV_OPT_LEVEL, "O0")
    with autocast():
        assert torch.nn.Linear(4, 4)(torch.randn(2, 4)).dtype == torch.bfloat16
    policy.reset_policy()
    with autocast():
        assert torch.nn.Linear(4, 4)(torch.randn(2, 4)).dtype == torch.float32


def test_device_from_the_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(policy.ENV_DEVICE, "cuda:1")
    policy.reset_policy()
    GradScaler().scale(torch.tensor(1.0))
    assert policy.resolve_device() == "cuda"


def test_device_follows_the_last_scaled_loss() -> None:
    assert policy.resolve_device() == ("cuda" if torch.cuda.is_available() else "cpu")
    loss = torch.tensor(1.0, device="meta")
    assert GradScaler().scale(loss) is loss  # bfloat16 on "meta": nothing to scale
    assert policy.resolve_device() == "meta"


def test_an_explicit_device_type_is_used_before_the_first_loss() -> None:
    GradScaler(device_type="meta:0")
    assert policy.resolve_device() == "meta"


def test_the_scalers_dtype_drives_autocast_regions() -> None:
    GradScaler(dtype="float16")
    with autocast():
        assert torch.nn.Linear(4, 4)(torch.randn(2, 4)).dtype == torch.float16
    with autocast(dtype="bfloat16"):
        assert torch.nn.Linear(4, 4)(torch.randn(2, 4)).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="float8"):
        GradScaler(dtype="float8")


def test_default_dtype_per_device() -> None:
    assert policy.resolve_dtype("cuda") == torch.float16  # no CUDA here: no bfloat16 cores
    assert policy.resolve_dtype("cpu") == torch.bfloat16
    with pytest.raises(ValueError, match="dtype"):
        policy.resolve_dtype("cpu", "float8")


@pytest.mark.parametrize(("capability", "expected"),
                         [((7, 5), torch.float16), ((8, 0), torch.bfloat16),
                          ((9, 0), torch.bfloat16)])
def test_cuda_defaults_to_bfloat16_where_it_has_tensor_cores(
    monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int], expected: torch.dtype
) -> None:
    """bfloat16 on A100/H100/RTX 30xx and later; float16 with loss scaling on V100/T4."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: type("Properties", (), {"major": capability[0]}))
    monkeypatch.setattr(torch.version, "hip", None)
    policy._cuda_has_bfloat16.cache_clear()
    try:
        assert policy.resolve_dtype("cuda") == expected
        # loss scaling only where the dtype is float16
        assert GradScaler()._new_torch_scaler("cuda").is_enabled() is (expected == torch.float16)
    finally:
        policy._cuda_has_bfloat16.cache_clear()


def test_frameworks_are_told_the_same_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    """`prefers_bfloat16()` and `low_precision_dtype()` follow the policy (the device
    training runs on, the environment's override)."""
    assert policy.low_precision_dtype() == torch.bfloat16 and policy.prefers_bfloat16()
    monkeypatch.setenv(policy.ENV_DTYPE, "float16")
    policy.reset_policy()
    assert policy.low_precision_dtype() == torch.float16 and not policy.prefers_bfloat16()


def test_autocast_settings_follow_every_change_of_the_policy() -> None:
    """autocast() reuses its settings between iterations, and drops them on any change."""
    settings = policy.current_policy().autocast_settings
    assert settings() == ("cpu", torch.bfloat16, True)
    GradScaler().scale(torch.tensor(1.0, device="meta"))  # training moved: the device follows
    assert settings() == ("meta", torch.bfloat16, True)
    GradScaler(opt_level="O2")  # the script declares another level: its regions are off
    assert settings() == ("meta", torch.bfloat16, False)
    GradScaler(opt_level="O1", dtype="float16")
    assert settings() == ("meta", torch.float16, True)
    assert settings("bfloat16") == ("meta", torch.bfloat16, True)
    assert settings() == ("meta", torch.float16, True)  # not cached


def test_scalers_declare_to_the_current_policy_until_it_is_reset() -> None:
    current = policy.current_policy()
    GradScaler("O2", dtype="float16", device_type="meta")
    assert (current.declared_level, current.declared_dtype, current.observed_device) == (
        "O2", torch.float16, "meta")
    policy.reset_policy()
    fresh = policy.current_policy()
    assert fresh is not current
    assert (fresh.declared_level, fresh.declared_dtype, fresh.observed_device) == (None,) * 3


def test_a_policy_built_by_hand_takes_only_its_own_overrides(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(policy.ENV_OPT_LEVEL, "O0")
    assert policy.Policy().opt_level() == "O1"
    pinned = policy.Policy(policy.Overrides(opt_level="O0", device_type="meta"))
    assert pinned.opt_level("O2") == "O0"
    assert pinned.autocast_settings() == ("meta", torch.bfloat16, False)


def test_an_invalid_level_is_refused_before_it_is_declared() -> None:
    GradScaler("O2")
    with pytest.raises(ValueError, match="'O5' is not valid"):
        GradScaler("O5")  # type: ignore[arg-type]
    assert policy.current_policy().declared_level == "O2"
