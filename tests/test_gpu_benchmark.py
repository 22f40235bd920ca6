"""benchmarks/gpu.py (issue 27), checked on the CPU before any GPU time is spent: its smoke
mode runs every code path but the CUDA-only calls and writes the table; the committed
rewritten scripts it times are what amprewrite makes now; the execution harness's switch to
another device (AMPREWRITE_TEST_DEVICE) leaves the CPU runs as they were.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.execution import DEVICE_ENV, run_device, subprocess_env

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "benchmarks"


def test_cpu_runs_hide_the_gpu_unless_a_device_is_asked_for(monkeypatch) -> None:
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert run_device() == "cpu"
    assert subprocess_env()["CUDA_VISIBLE_DEVICES"] == ""
    assert subprocess_env({DEVICE_ENV: "cuda"})["CUDA_VISIBLE_DEVICES"] == "0"
    monkeypatch.setenv(DEVICE_ENV, "cuda")
    assert run_device() == "cuda"
    assert subprocess_env()["CUDA_VISIBLE_DEVICES"] == "0"


DEFAULT_DEVICE_PROBE = """
import sys, torch
sys.path.insert(0, sys.argv[1])
import _bootstrap
record = _bootstrap._new_record("probe.py", [])
_bootstrap._install_observers(record)
_bootstrap.install_default_device("meta")
generator = torch.Generator().manual_seed(0)
drawn = torch.randn(3, generator=generator)
print(torch.randn(2).device, torch.nn.Linear(2, 2).weight.device,
      torch.zeros(1, device="cpu").device, drawn.device,
      torch.randperm(4, generator=torch.Generator()).device)
x = torch.ones(2, requires_grad=True)
(x * 2).backward(torch.FloatTensor([1, 1]))
print(x.grad.device, record["backward_count"])
try:
    torch.ones(2).numpy()
except NotImplementedError as error:  # .cpu() first: a meta tensor has no data to copy
    print("copied" if "meta" in str(error) else error)
"""


def test_default_device_as_a_gpu_script_would_have_it() -> None:
    """The bootstrap's default device (for GPU runs; `meta` stands in for CUDA here): made
    without a device means made there, a random op drawing from a CPU generator too (as on
    the CPU, then moved: the script's seeded data is the same); a CPU gradient given to
    `backward` is moved (and the backward observed once), and `.numpy()` copies to the CPU
    first (on meta, that copy is what fails)."""
    out = subprocess.run([sys.executable, "-c", DEFAULT_DEVICE_PROBE, str(REPO / "tests")],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["meta", "meta", "cpu", "meta", "meta", "meta", "1", "copied"]


@pytest.mark.parametrize("model", ["mlp", "resnet50", "gpt2"])
def test_committed_rewrites_are_what_amprewrite_makes_now(model: str) -> None:
    """benchmarks/gpu_scripts/<model>_rewrite.py is committed (the GPU machine has no libcst):
    it must be amprewrite's O1 rewrite of <model>_fp32.py as the codemod stands
    (`python benchmarks/gpu.py --regenerate` updates them)."""
    from amprewrite.engine import rewrite_source
    from amprewrite.options import Options

    scripts = BENCHMARKS / "gpu_scripts"
    expected = rewrite_source((scripts / f"{model}_fp32.py").read_bytes(),
                              Options(opt_level="O1")).source
    assert (scripts / f"{model}_rewrite.py").read_bytes() == expected, (
        "stale: run python benchmarks/gpu.py --regenerate")


@pytest.mark.parametrize("model", ["mlp", "resnet50", "gpt2"])
def test_hand_written_version_differs_from_fp32_only_by_torch_amp(model: str) -> None:
    """The hand-written scripts are the FP32 ones plus torch.amp and the dtype, nothing else
    (same model, data, optimizer and loop), so the three variants time the same work."""
    import difflib

    scripts = BENCHMARKS / "gpu_scripts"
    fp32 = (scripts / f"{model}_fp32.py").read_text().split('"""')[2].splitlines()
    hand = (scripts / f"{model}_torch_amp.py").read_text().split('"""')[2].splitlines()
    added = [line[1:].strip() for line in difflib.unified_diff(fp32, hand, n=0, lineterm="")
             if line.startswith("+") and not line.startswith("+++")]
    removed = [line[1:].strip() for line in difflib.unified_diff(fp32, hand, n=0, lineterm="")
               if line.startswith("-") and not line.startswith("---")]
    assert removed == ["outputs = model(inputs)", "loss = loss_fn(outputs, targets)",
                       "loss.backward()", "optimizer.step()"]
    assert "with torch.autocast(device.type, dtype=dtype):" in added
    assert "scaler.scale(loss).backward()" in added


# Every model's three scripts, both dtypes and both modes, in a third of the units: each path
# of the full run (the other units differ only in their model or dtype).
SMOKE_UNITS = ["eager:mlp:bfloat16", "eager:resnet50:float16", "eager:gpt2:bfloat16",
               "compile:gpt2:float16"]


@pytest.mark.slow
def test_smoke_mode_runs_every_path_and_writes_the_table(tmp_path: Path) -> None:
    """`gpu.py --smoke` on the CPU: fixtures, eager and compiled units of both dtypes and
    three models, the graph-break counts, the JSON and the table."""
    env = {key: value for key, value in os.environ.items() if key != DEVICE_ENV}
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "gpu.py"), "--smoke", "--out", str(tmp_path),
         "--units", *SMOKE_UNITS],
        env=env, capture_output=True, text=True, timeout=900, check=False)
    assert completed.returncode == 0, completed.stderr[-4000:]
    report = json.loads((tmp_path / "gpu.json").read_text())
    assert report["machine"]["smoke"] is True
    assert [check["status"] for check in report["fixtures"]] == ["ok"] * 4
    assert [row["unit"] for row in report["timings"]] == SMOKE_UNITS
    assert report["missing"] == []
    for row in report["timings"]:
        assert set(row["median_ms"]) == {"fp32", "rewrite", "hand"}
        assert row["rounds"] >= 1
        if row["mode"] == "compile":
            assert set(row["dynamo"]) == {"rewrite", "hand", "during_runs"}
            assert row["dynamo"]["rewrite"]["graphs"] >= 1
    table = (tmp_path / "gpu_table.md").read_text().splitlines()
    rows = [line for line in table if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + len(SMOKE_UNITS)  # the header and a row per unit
    assert all(row.count(" | ") == 12 for row in rows)  # 13 columns
    assert table[0].startswith("Smoke run of")


def test_a_short_budget_skips_units_and_still_writes_the_table(tmp_path: Path) -> None:
    """What a budget leaves out is said, not dropped: the table still comes out."""
    from benchmarks.gpu_timing import UNITS

    env = {key: value for key, value in os.environ.items() if key != DEVICE_ENV}
    completed = subprocess.run(
        [sys.executable, str(BENCHMARKS / "gpu.py"), "--smoke", "--skip-fixtures",
         "--budget", "0", "--out", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=300, check=False)
    assert completed.returncode == 0, completed.stderr[-4000:]
    report = json.loads((tmp_path / "gpu.json").read_text())
    assert report["timings"] == [] and report["fixtures"] == []
    assert [record["unit"] for record in report["missing"]] == UNITS
    assert "Not measured: compile:gpt2:float16: budget." in (tmp_path / "gpu_table.md").read_text()
