"""Float8 training: chosen at run time, forced by AMPREWRITE_DTYPE=float8 (emulated on the
CPU), with the layers float8 cannot serve left to bfloat16 autocast."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from amprewrite_runtime import GradScaler, autocast, float8_training, policy
from torch import nn

pytest.importorskip("torchao")


class Tiny(nn.Module):
    """An embedding, an attention block, an MLP of float8-sized layers, an odd one, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(32, 4, batch_first=True)
        self.up = nn.Linear(32, 64)
        self.down = nn.Linear(64, 32)
        self.odd = nn.Linear(32, 20)
        self.head = nn.Linear(20, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(x, x, x, need_weights=False)[0]
        x = x + self.down(torch.relu(self.up(x)))
        return self.head(torch.relu(self.odd(x)))


def _converted(model: nn.Module) -> set[str]:
    return {name for name, module in model.named_modules()
            if type(module).__name__ == "Float8Linear"}


def test_the_cpu_keeps_bfloat16_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    model = Tiny()
    assert float8_training(model) is model and not _converted(model)
    assert "bfloat16, not float8: no float8 matrix multiplies on cpu" in capsys.readouterr().err


def test_forced_float8_converts_what_float8_gemms_can_take(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(policy.ENV_DTYPE, "float8")
    policy.reset_policy()
    model = Tiny()
    parameters = list(model.parameters())
    model = float8_training(model)
    assert _converted(model) == {"up", "down"}  # not out_proj, the odd layer or the head
    assert "float8 (emulated" in capsys.readouterr().err
    # the same parameters: an optimizer built before still steps them
    assert all(a is b for a, b in zip(parameters, model.parameters(), strict=True))
    with autocast():
        out = model(torch.randn(2, 8, 32))
    assert out.dtype == torch.bfloat16


def test_forced_float8_trains_and_its_checkpoint_loads_in_float32(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(policy.ENV_DTYPE, "float8")
    policy.reset_policy()
    torch.manual_seed(0)
    model = float8_training(Tiny())
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    scaler = GradScaler()
    x, y = torch.randn(16, 8, 32), torch.randint(0, 16, (16, 8))
    losses = []
    for _ in range(20):
        optimizer.zero_grad()
        with autocast():
            loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]
    plain = Tiny()
    plain.load_state_dict(model.state_dict())
    assert torch.equal(plain.up.weight, model.up.weight)


@pytest.mark.parametrize(("variable", "value", "reason"), [
    (policy.ENV_DTYPE, "bfloat16", "AMPREWRITE_DTYPE asks for bfloat16"),
    (policy.ENV_OPT_LEVEL, "O0", "opt level O0"),
])
def test_another_choice_in_the_environment_leaves_the_model(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], variable: str,
    value: str, reason: str,
) -> None:
    monkeypatch.setenv(variable, value)
    if variable != policy.ENV_DTYPE:
        monkeypatch.setenv(policy.ENV_DTYPE, "float8")
    policy.reset_policy()
    model = float8_training(Tiny())
    assert not _converted(model) and reason in capsys.readouterr().err


def test_forced_float8_without_torchao_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(policy.ENV_DTYPE, "float8")
    policy.reset_policy()
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "torchao" else find_spec(name, *args))
    with pytest.raises(RuntimeError, match="needs torchao"):
        float8_training(Tiny())


def test_a_model_without_float8_sized_layers_stays_bfloat16(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(policy.ENV_DTYPE, "float8")
    policy.reset_policy()
    model = float8_training(nn.Sequential(nn.Linear(10, 12), nn.ReLU(), nn.Linear(12, 3)))
    assert not _converted(model)
    assert "none of the model's 2 linear layers can take it" in capsys.readouterr().err


def test_a_model_without_linear_layers_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(policy.ENV_DTYPE, "float8")
    policy.reset_policy()
    model = nn.Conv1d(4, 16, 3)
    assert float8_training(model) is model
    assert "bfloat16, not float8: the model has no linear layer" in capsys.readouterr().err


def test_fsdp_models_get_their_scales_precomputed_after_each_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torchao.float8

    monkeypatch.setenv(policy.ENV_DTYPE, "float8")
    policy.reset_policy()
    precomputed: list[nn.Module] = []
    monkeypatch.setattr(torchao.float8, "precompute_float8_dynamic_scale_for_fsdp",
                        precomputed.append)
    model = float8_training(Tiny(), fsdp=True)
    other = nn.Linear(4, 4)
    scaler = GradScaler()
    for optimizer in (torch.optim.SGD(other.parameters()), torch.optim.SGD(model.parameters())):
        scaler.step(optimizer)
    assert precomputed == [model]


@pytest.mark.parametrize(("environment", "precision", "recipe"), [
    ({}, "bf16", False),
    ({policy.ENV_DTYPE: "float8"}, "fp8", True),
    ({policy.ENV_DTYPE: "float8", policy.ENV_OPT_LEVEL: "O0"}, "no", False),
    ({policy.ENV_DTYPE: "float8", "ACCELERATE_MIXED_PRECISION": "bf16"}, None, False),
])
def test_accelerate_gets_its_float8_recipe_where_float8_is_chosen(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], precision: str | None,
    recipe: bool,
) -> None:
    pytest.importorskip("accelerate")
    from accelerate.utils import AORecipeKwargs
    from amprewrite_runtime import accelerate_float8_handlers, accelerate_mixed_precision

    for variable, value in environment.items():
        monkeypatch.setenv(variable, value)
    policy.reset_policy()
    assert accelerate_mixed_precision("float8") == precision
    handlers = accelerate_float8_handlers()
    assert [type(h) for h in handlers] == ([AORecipeKwargs] if recipe else [])
    assert not handlers or handlers[0].config.emulate  # no float8 matrix multiplies here
