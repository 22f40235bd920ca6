"""benchmarks/gpu.py (issue 27), checked on the CPU before any GPU time is spent: its smoke
mode runs every code path but the CUDA-only calls and writes the table; the committed
rewritten scripts it times are what amprewrite makes now; the execution harness's switch to
another device (AMPREWRITE_TEST_DEVICE) leaves the CPU runs as they were.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
_bootstrap.install_default_device("meta")
print(torch.randn(2).device, torch.nn.Linear(2, 2).weight.device,
      torch.zeros(1, device="cpu").device,
      torch.randperm(4, generator=torch.Generator()).device)
"""


def test_default_device_spares_cpu_generators() -> None:
    """The bootstrap's default device (for GPU runs; `meta` stands in for CUDA here): made
    without a device means made there, except a random op drawing from a CPU generator, as
    a DataLoader's shuffling does (its RandomSampler: `randperm(n, generator=cpu_generator)`)."""
    out = subprocess.run([sys.executable, "-c", DEFAULT_DEVICE_PROBE, str(REPO / "tests")],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["meta", "meta", "cpu", "cpu"]
