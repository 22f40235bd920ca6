"""Today's training stacks, rewritten and run with the real libraries on the CPU.

Each fixture's FP32 `input.py` and its rewrite run in CPU subprocesses (`tests/execution.py`)
with `transformers`, `accelerate`, `lightning` and FSDP2 on two gloo ranks:

* the framework switches the rewrite writes are ones the framework takes here: Accelerate
  and Lightning train in bfloat16 on the CPU (their `nn.Linear` outputs are bfloat16 under
  autocast) and learn as in FP32; the Hugging Face Trainer, which takes bf16 on a CPU only
  with `use_cpu=True`, trains in bfloat16 where the script says so and stays FP32 (instead of
  raising) where it does not;
* `AMPREWRITE_DTYPE=float16` (what an older GPU gets) asks the frameworks for fp16, which
  none of them may crash on here;
* FSDP2's rewrite (mixed-precision policy, autocast, sharded scaler) trains on two ranks in
  bfloat16 and in float16 as the FP32 script does.

The libraries come from `tests/requirements-frameworks.txt` (`.ci/run` installs them and sets
`AMPREWRITE_REQUIRE_FRAMEWORKS=1`, which turns a missing library into a failure). DeepSpeed's
engine needs its compiled ops and an accelerator: its rewrite is checked as a fixture pair
only.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import subprocess
import sys

import pytest

from tests.execution import (
    BFLOAT16,
    FIXTURES_DIR,
    FLOAT32,
    Job,
    ScriptRun,
    run_scripts,
    subprocess_env,
)

pytestmark = pytest.mark.slow
FLOAT16_ENV = {"AMPREWRITE_DTYPE": "float16"}


def _require(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return
    message = (f"{', '.join(missing)} not installed: "
               "pip install -r tests/requirements-frameworks.txt")
    if os.environ.get("AMPREWRITE_REQUIRE_FRAMEWORKS"):
        pytest.fail(message)
    pytest.skip(message)


def _runs(case: str, *envs: dict[str, str] | None, expected: str = "expected_O1.py"
          ) -> list[ScriptRun]:
    """The FP32 input, then the rewrite once per environment, side by side."""
    directory = FIXTURES_DIR / case
    jobs = [Job.of(directory / "input.py"),
            *(Job.of(directory / expected, env=env) for env in envs)]
    runs = run_scripts(jobs)
    for run in runs:
        assert run.ok, run.explain()
        assert run.losses, run.explain()
    return runs


def _close(low: list[float], fp32: list[float], tolerance: float) -> None:
    """The last losses agree within `tolerance` (relative), and both runs learned."""
    assert len(low) == len(fp32)
    assert abs(low[-1] - fp32[-1]) <= tolerance * fp32[-1], (low[-4:], fp32[-4:])
    assert fp32[-1] < fp32[0] and low[-1] < low[0]


def test_accelerate_trains_in_bfloat16_on_the_cpu() -> None:
    """And the choice of `accelerate launch --mixed_precision` (or of Accelerate's config:
    both set ACCELERATE_MIXED_PRECISION) and AMPREWRITE_OPT_LEVEL=O0 win over the rewrite's."""
    _require("accelerate")
    fp32, bf16, fp16, launched, o0 = _runs(
        "framework_accelerate_script", None, FLOAT16_ENV, {"ACCELERATE_MIXED_PRECISION": "no"},
        {"AMPREWRITE_OPT_LEVEL": "O0"})
    assert set(fp32.train_dtypes) == {FLOAT32}
    assert set(bf16.train_dtypes) == {BFLOAT16}, bf16.train_dtypes[:4]
    _close(bf16.losses, fp32.losses, 0.1)
    # fp16 on a CPU: Accelerate leaves it off, and the script still trains
    assert set(fp16.train_dtypes) == {FLOAT32} and fp16.losses == fp32.losses
    for run in (launched, o0):
        assert set(run.train_dtypes) == {FLOAT32} and run.losses == fp32.losses


def test_lightning_trains_in_bfloat16_on_the_cpu() -> None:
    _require("lightning")
    fp32, bf16, fp16 = _runs("framework_lightning_script", None, FLOAT16_ENV)
    assert set(fp32.train_dtypes) == {FLOAT32}
    assert set(bf16.train_dtypes) == {BFLOAT16}, bf16.train_dtypes[:4]
    _close(bf16.losses, fp32.losses, 0.1)
    assert fp16.losses  # "16-mixed" on a CPU: Lightning runs it as bf16-mixed


def test_hf_trainer_trains_in_bfloat16_where_told_to_use_the_cpu() -> None:
    _require("transformers", "accelerate")
    fp32, bf16 = _runs("framework_hf_trainer_cpu", None)
    assert set(fp32.train_dtypes) == {FLOAT32}
    assert BFLOAT16 in bf16.train_dtypes, bf16.train_dtypes[:4]  # lm_head under autocast
    _close(bf16.losses, fp32.losses, 0.1)


def test_hf_trainer_without_a_gpu_stays_fp32_instead_of_raising() -> None:
    """`bf16=True` on a machine without a GPU makes `TrainingArguments` raise ("Your setup
    doesn't support bf16/gpu"): the rewrite asks for bf16/fp16 only where CUDA is."""
    _require("transformers", "accelerate")
    fp32, rewritten, fp16 = _runs("framework_hf_trainer", None, FLOAT16_ENV)
    assert set(rewritten.train_dtypes) == {FLOAT32}
    assert rewritten.losses == fp32.losses and fp16.losses == fp32.losses


_STEP = re.compile(r"^step \d+ loss (\S+)$", re.MULTILINE)


def _fsdp_losses(script: str, env: dict[str, str], port: int) -> list[float]:
    """Rank 0's losses of a two-rank gloo run (its own processes: `mp.spawn`)."""
    environment = subprocess_env({**env, "FSDP_PORT": str(port), "OMP_NUM_THREADS": "1"})
    done = subprocess.run([sys.executable, str(FIXTURES_DIR / "rule_fsdp2_policy" / script)],
                          env=environment, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return [float(loss) for loss in _STEP.findall(done.stdout)]


@functools.cache
def _fsdp_fp32_losses() -> list[float]:
    return _fsdp_losses("input.py", {}, 29600 + os.getpid() % 50)


@pytest.mark.parametrize("env", [{}, FLOAT16_ENV], ids=["bfloat16", "float16"])
def test_fsdp2_policy_trains_on_two_ranks(env: dict[str, str]) -> None:
    fp32 = _fsdp_fp32_losses()
    low = _fsdp_losses("expected_O1.py", env, 29660 + 10 * len(env) + os.getpid() % 7)
    assert len(fp32) == 30
    _close(low, fp32, 0.15)
