"""`--dtype float8` rewrites, run on the CPU: float8 forced by `AMPREWRITE_DTYPE=float8`
(torchao's emulation: values rounded to float8 for every converted matrix multiply, under
bfloat16 autocast) train as FP32 and bfloat16 do; without it the CPU gets bfloat16 (no
conversion), and `AMPREWRITE_OPT_LEVEL=O0` gives back FP32's losses exactly. FSDP2 on two gloo
ranks trains with float8 all-gather and the per-step scale precompute."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest

from tests.execution import (
    BFLOAT16,
    BFLOAT16_ENV,
    FIXTURES_DIR,
    FLOAT32,
    Job,
    ScriptRun,
    run_scripts,
    subprocess_env,
)

pytest.importorskip("torchao")

FLOAT8_ENV = {"AMPREWRITE_DTYPE": "float8"}
FP32_ENV = {"AMPREWRITE_OPT_LEVEL": "O0"}
CASES = {  # fixture -> (arguments, relative tolerance of the last loss against FP32's)
    "float8_mlp": ((), 0.05),
    "float8_gpt": (("--steps", "60"), 0.05),
    "transformer_lm": (("--max-iters", "40"), 0.05),
}


def _runs(name: str) -> dict[str, ScriptRun]:
    """FP32, the bfloat16 rewrite, and the float8 rewrite forced, by default (the CPU's
    choice: bfloat16) and at O0."""
    directory, args = FIXTURES_DIR / name, CASES[name][0]
    float8 = directory / "expected_O1_float8.py"
    jobs = {"fp32": Job.of(directory / "input.py", args),
            "bfloat16": Job.of(directory / "expected_O1.py", args, BFLOAT16_ENV),
            "float8": Job.of(float8, args, FLOAT8_ENV),
            "default": Job.of(float8, args),
            "o0": Job.of(float8, args, {**FLOAT8_ENV, **FP32_ENV})}
    runs = dict(zip(jobs, run_scripts(list(jobs.values())), strict=True))
    for run in runs.values():
        assert run.ok, run.explain()
    return runs


def _float8_forwards(run: ScriptRun) -> int:
    return sum(1 for forward in run.forwards if forward[0] == "Float8Linear")


@pytest.mark.parametrize("name", CASES)
def test_forced_float8_trains_like_fp32_and_bfloat16(name: str) -> None:
    runs = _runs(name)
    fp32, bf16, float8 = runs["fp32"], runs["bfloat16"], runs["float8"]
    assert "amprewrite: float8 (emulated" in float8.stderr
    assert _float8_forwards(float8) > 0 and _float8_forwards(bf16) == 0
    assert BFLOAT16 in float8.train_dtypes and set(fp32.train_dtypes) == {FLOAT32}
    assert len(float8.losses) == len(bf16.losses) == len(fp32.losses) >= 40
    assert float8.losses != bf16.losses  # float8's rounding changed the numbers
    assert float8.losses[-1] < 0.7 * float8.losses[0]  # it learned
    tolerance = CASES[name][1]
    for low in (bf16, float8):
        assert low.losses[-1] == pytest.approx(fp32.losses[-1], rel=tolerance)


@pytest.mark.parametrize("name", CASES)
def test_float8_rewrite_runs_bfloat16_on_the_cpu_and_fp32_at_o0(name: str) -> None:
    runs = _runs(name)
    default, o0 = runs["default"], runs["o0"]
    assert "amprewrite: bfloat16, not float8: no float8 matrix multiplies on cpu" in default.stderr
    assert _float8_forwards(default) == 0
    assert default.losses == runs["bfloat16"].losses
    assert _float8_forwards(o0) == 0 and o0.losses == runs["fp32"].losses


_STEP = re.compile(r"^step \d+ loss (\S+)$", re.MULTILINE)


def _fsdp_run(script: str, env: dict[str, str], port: int) -> tuple[list[float], str]:
    """Rank 0's losses of a two-rank gloo run of rule_fsdp2_policy's `script`, and stderr."""
    environment = subprocess_env({**env, "FSDP_PORT": str(port), "OMP_NUM_THREADS": "1"})
    done = subprocess.run([sys.executable, str(FIXTURES_DIR / "rule_fsdp2_policy" / script)],
                          env=environment, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return [float(loss) for loss in _STEP.findall(done.stdout)], done.stderr


def test_fsdp2_trains_in_float8_on_two_gloo_ranks() -> None:
    port = 29700 + os.getpid() % 50
    fp32, _ = _fsdp_run("input.py", {}, port)
    bf16, _ = _fsdp_run("expected_O1.py", BFLOAT16_ENV, port + 1)
    float8, told = _fsdp_run("expected_O1_float8.py", FLOAT8_ENV, port + 2)
    assert told.count("amprewrite: float8 (emulated") == 2  # once per rank
    assert len(float8) == len(bf16) == len(fp32) == 30
    assert float8 != bf16
    assert float8[-1] < float8[0]
    for low in (bf16, float8):
        assert low[-1] == pytest.approx(fp32[-1], rel=0.15)


def test_accelerate_trains_with_its_torchao_float8_recipe() -> None:
    """`accelerate_mixed_precision("float8")` and `accelerate_float8_handlers()`: Accelerate's
    own float8 (torchao) where float8 is forced, bfloat16 by default on this CPU."""
    if importlib.util.find_spec("accelerate") is None:
        message = "accelerate not installed: pip install -r tests/requirements-frameworks.txt"
        if os.environ.get("AMPREWRITE_REQUIRE_FRAMEWORKS"):
            pytest.fail(message)
        pytest.skip(message)
    directory = FIXTURES_DIR / "float8_accelerate"
    fp32, default, float8 = run_scripts([
        Job.of(directory / "input.py"), Job.of(directory / "expected_O1_float8.py"),
        Job.of(directory / "expected_O1_float8.py", env=FLOAT8_ENV)])
    for run in (fp32, default, float8):
        assert run.ok and run.losses, run.explain()
    assert "amprewrite: float8 (Accelerate's torchao recipe, emulated" in float8.stderr
    assert _float8_forwards(float8) > 0 and _float8_forwards(default) == 0
    assert BFLOAT16 in float8.train_dtypes and BFLOAT16 in default.train_dtypes
    assert len(float8.losses) == len(fp32.losses) == 64 and float8.losses != default.losses
    for low in (default, float8):
        assert low.losses[-1] == pytest.approx(fp32.losses[-1], rel=0.15)
        assert low.losses[-1] < 0.3 * low.losses[0]
