"""The framework switch helpers: mixed precision by default, the framework's launcher or
config when it chose, FP32 at AMPREWRITE_OPT_LEVEL=O0; and the trace of a framework's steps."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from amprewrite_runtime import (
    accelerate_mixed_precision,
    framework_trace,
    lightning_precision,
    mixed_precision_flag,
    policy,
)
from amprewrite_runtime.frameworks import ENV_ACCELERATE, ENV_LIGHTNING
from amprewrite_runtime.trace import ENV_MAX_STEPS, ENV_TRACE, Tracer
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook


@pytest.fixture(autouse=True)
def no_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in (ENV_ACCELERATE, ENV_LIGHTNING, ENV_TRACE, ENV_MAX_STEPS):
        monkeypatch.delenv(variable, raising=False)


def _env(monkeypatch: pytest.MonkeyPatch, **variables: str) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    policy.reset_policy()


def test_mixed_precision_by_default_in_the_policys_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (accelerate_mixed_precision(), lightning_precision()) == ("bf16", "bf16-mixed")
    assert mixed_precision_flag("bf16") and not mixed_precision_flag("fp16")
    _env(monkeypatch, AMPREWRITE_DTYPE="float16")
    assert (accelerate_mixed_precision(), lightning_precision()) == ("fp16", "16-mixed")
    assert mixed_precision_flag("fp16") and not mixed_precision_flag("bf16")


def test_the_dtype_the_rewrite_was_given_is_kept() -> None:
    assert accelerate_mixed_precision("float16") == "fp16"
    assert lightning_precision("float16") == "16-mixed"
    assert mixed_precision_flag("fp16", "float16") and not mixed_precision_flag("bf16", "float16")


@pytest.mark.parametrize("launched", ["no", "bf16", "fp16"])
def test_the_launchers_choice_wins(monkeypatch: pytest.MonkeyPatch, launched: str) -> None:
    """`accelerate launch --mixed_precision X` sets ACCELERATE_MIXED_PRECISION, which
    Accelerate reads only when the script passes None, and the Hugging Face Trainer only when
    neither flag is set."""
    _env(monkeypatch, ACCELERATE_MIXED_PRECISION=launched)
    assert accelerate_mixed_precision() is None and accelerate_mixed_precision("float16") is None
    assert not mixed_precision_flag("bf16") and not mixed_precision_flag("fp16")
    _env(monkeypatch, LT_PRECISION="32-true")
    assert lightning_precision() is None


def test_o0_turns_every_switch_off(monkeypatch: pytest.MonkeyPatch) -> None:
    _env(monkeypatch, AMPREWRITE_OPT_LEVEL="O0", ACCELERATE_MIXED_PRECISION="bf16")
    assert accelerate_mixed_precision() == "no" and lightning_precision() == "32-true"
    assert not mixed_precision_flag("bf16", "bfloat16") and not mixed_precision_flag("fp16")
    _env(monkeypatch, LT_PRECISION="bf16-mixed")  # `fabric run` refuses a contradiction
    assert lightning_precision() is None


def test_an_unknown_flag_is_refused() -> None:
    with pytest.raises(ValueError, match="'bf8' is not valid"):
        mixed_precision_flag("bf8")


@pytest.fixture
def traced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A trace file, and torch's methods and hooks as they were once the test is over."""
    path = tmp_path / "trace.jsonl"
    _env(monkeypatch, AMPREWRITE_TRACE=str(path))
    monkeypatch.setattr(Tracer, "_shared", None)
    monkeypatch.setattr(framework_trace, "_installed", False)
    for owner, name in [(torch.Tensor, "backward"), *((torch.amp.GradScaler, method)
                                                       for method in ("scale", "step", "update"))]:
        monkeypatch.setattr(owner, name, getattr(owner, name))
    handles = []

    def register(hook: Callable[..., Any]) -> Any:
        handles.append(register_optimizer_step_post_hook(hook))
        return handles[-1]

    monkeypatch.setattr(framework_trace, "register_optimizer_step_post_hook", register)
    yield path
    for handle in handles:
        handle.remove()


def _train(steps: int, scaler: torch.amp.GradScaler | None = None) -> list[float]:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        losses.append(loss.item())
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
    return losses


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_framework_loop_is_traced_step_by_step(traced: Path) -> None:
    """Bfloat16 or FP32 (no loss scaling): each optimizer step is one record, with the loss
    its backward ran on and the dtype the switch asked for."""
    accelerate_mixed_precision()
    losses = _train(3)
    records = _records(traced)
    assert [r["step"] for r in records] == [1, 2, 3]
    assert [r["loss"] for r in records] == pytest.approx(losses)
    assert {(r["opt_level"], r["dtype"], r["scale"], r["skipped"]) for r in records} == {
        ("O1", "bfloat16", 1.0, False)}


def test_a_framework_scalers_steps_are_traced_with_their_scale(traced: Path) -> None:
    """float16: torch's GradScaler scales; the record has the unscaled loss, its scale, and
    whether inf/NaN gradients skipped the step."""
    accelerate_mixed_precision("float16")
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
    losses = _train(2, scaler)
    records = _records(traced)
    assert [r["loss"] for r in records] == pytest.approx(losses)
    assert [r["scale"] for r in records] == [2.0 ** 10, 2.0 ** 10]
    assert {(r["dtype"], r["skipped"]) for r in records} == {("float16", False)}


def test_the_step_budget_ends_a_framework_run(traced: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_MAX_STEPS, "2")
    lightning_precision()
    with pytest.raises(SystemExit) as ended:
        _train(5)
    assert ended.value.code == 0 and len(_records(traced)) == 2


def test_a_runtime_scaler_traces_its_steps_alone(traced: Path) -> None:
    """A process whose steps go through amprewrite_runtime's GradScaler (a loop of its own
    beside the framework's) gets one record per step, not one from each tracer."""
    from amprewrite_runtime import GradScaler

    accelerate_mixed_precision("float16")
    scaler = GradScaler()
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        scaler.scale(nn.functional.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1))).backward()
        scaler.step(optimizer)
        scaler.update()
    assert [r["step"] for r in _records(traced)] == [1, 2]
