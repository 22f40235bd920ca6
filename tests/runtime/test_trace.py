"""Step traces (`AMPREWRITE_TRACE`) and the step budget (`AMPREWRITE_MAX_STEPS`)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from amprewrite_runtime import GradScaler, autocast, policy
from amprewrite_runtime.trace import ENV_MAX_STEPS, ENV_TRACE, StepRecord, Tracer
from torch import nn

RUNTIME_DIR = Path(__file__).resolve().parents[2] / "runtime"


@pytest.fixture(autouse=True)
def fresh_tracer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_TRACE, raising=False)
    monkeypatch.delenv(ENV_MAX_STEPS, raising=False)
    monkeypatch.setattr(Tracer, "_shared", None)


@pytest.fixture
def trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "trace.jsonl"
    monkeypatch.setenv(ENV_TRACE, str(path))
    return path


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _train(scaler: GradScaler, steps: int, overflow_at: int | None = None) -> list[float]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    losses = []
    for step in range(steps):
        optimizer.zero_grad()
        with autocast():
            loss = nn.functional.mse_loss(model(x).float(), y)
        scaler.scale(loss).backward()
        if step == overflow_at:
            model[0].weight.grad[0, 0] = float("inf")
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    return losses


def test_one_record_per_optimizer_step(trace: Path) -> None:
    losses = _train(GradScaler(), steps=5)
    records = _records(trace)
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]
    assert [r["iteration"] for r in records] == [1, 2, 3, 4, 5]
    assert [r["loss"] for r in records] == pytest.approx(losses)
    assert all(r["time_s"] > 0 and not r["skipped"] and r["scale"] == 1.0 for r in records)
    assert {(r["opt_level"], r["dtype"], r["device"]) for r in records} == {
        ("O1", "bfloat16", "cpu")}


def test_skipped_steps_are_flagged_and_the_scale_backs_off(trace: Path) -> None:
    _train(GradScaler(dtype="float16", init_scale=256.0), steps=4, overflow_at=1)
    records = _records(trace)
    assert [r["skipped"] for r in records] == [False, True, False, False]
    assert [r["scale"] for r in records] == [256.0, 256.0, 128.0, 128.0]
    assert {r["dtype"] for r in records} == {"float16"}
    assert all(math.isfinite(r["loss"]) for r in records)


def test_fp32_through_the_environment(trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(policy.ENV_OPT_LEVEL, "O0")
    policy.reset_policy()
    _train(GradScaler(), steps=2)
    assert {(r["opt_level"], r["dtype"]) for r in _records(trace)} == {("O0", "float32")}


def test_several_optimizers_one_record_each_timed_per_iteration(trace: Path) -> None:
    generator, critic = nn.Linear(4, 4), nn.Linear(4, 1)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.01) for m in (generator, critic)]
    scaler = GradScaler()
    for _ in range(3):
        for optimizer, model in zip(optimizers, (critic, generator), strict=True):
            optimizer.zero_grad()
            with autocast():
                loss = model(torch.randn(2, 4)).float().pow(2).mean()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
        scaler.update()
    records = _records(trace)
    assert [(r["step"], r["iteration"]) for r in records] == [
        (1, 1), (2, 1), (3, 2), (4, 2), (5, 3), (6, 3)]
    for first, second in zip(records[::2], records[1::2], strict=True):
        assert second["time_s"] >= first["time_s"]  # the iteration's time so far
        assert second["loss"] != first["loss"]  # each step records its own loss


def test_the_tracer_writes_the_step_record_it_is_given(tmp_path: Path) -> None:
    tracer = Tracer(str(tmp_path / "trace.jsonl"), max_steps=None)
    tracer.on_scale(torch.tensor(2.5))
    tracer.on_step(StepRecord("O2", "float16", "cpu", 128.0, skipped=True))
    tracer.on_step(None)  # counted, not written (another rank's step)
    tracer.close()
    [record] = _records(tmp_path / "trace.jsonl")
    assert tracer.steps == 2
    assert {key: record[key] for key in ("step", "loss", "scale", "skipped", "opt_level",
                                         "dtype", "device")} == {
        "step": 1, "loss": 2.5, "scale": 128.0, "skipped": True, "opt_level": "O2",
        "dtype": "float16", "device": "cpu"}


def test_off_by_default_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    scaler = GradScaler()
    assert scaler._tracer is None
    _train(scaler, steps=3)
    assert list(tmp_path.iterdir()) == []


def test_a_bad_step_budget_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_MAX_STEPS, "ten")
    with pytest.raises(ValueError, match="AMPREWRITE_MAX_STEPS='ten' is not valid"):
        GradScaler()


SCRIPT = """\
import torch
from amprewrite_runtime import GradScaler, autocast

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = GradScaler()
for step in range(100):
    optimizer.zero_grad()
    with autocast():
        loss = model(torch.randn(8, 4)).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    print("iteration", step)
print("loop finished")
"""


def test_max_steps_ends_the_run_cleanly(tmp_path: Path) -> None:
    script, trace_path = tmp_path / "train.py", tmp_path / "trace.jsonl"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, ENV_MAX_STEPS: "3", ENV_TRACE: str(trace_path),
           "PYTHONPATH": os.pathsep.join([str(RUNTIME_DIR), os.environ.get("PYTHONPATH", "")]),
           "CUDA_VISIBLE_DEVICES": ""}
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    # the third step's update() ended the run: no print after it, nor after the loop
    assert run.stdout.splitlines() == ["iteration 0", "iteration 1"]
    assert [r["step"] for r in _records(trace_path)] == [1, 2, 3]


def test_only_rank_zero_traces_a_distributed_run(
    trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_rank", lambda: 1)
    scaler = GradScaler()
    _train(scaler, steps=2)
    assert not trace.exists()
    assert scaler._tracer is not None and scaler._tracer.steps == 2  # the budget still counts
    monkeypatch.setattr(torch.distributed, "get_rank", lambda: 0)
    _train(GradScaler(), steps=2)
    assert [r["step"] for r in _records(trace)] == [3, 4]
