"""The scaler protocol on every path: rewrites with skip branches, early exits, optimizers
stepped at different rates or held in containers run in bfloat16 and under float16 loss
scaling (`AMPREWRITE_DTYPE=float16`), where torch's GradScaler raises on a second
`unscale_`/`step` of an optimizer before `update()`, and on an `update()` with nothing to do.

Each script makes its own non-finite gradients at fixed steps (an `inf` in one sample), so
the skip branches really run; oom_retry's model raises an out-of-memory error every seventh
forward.
"""

from __future__ import annotations

import math
import re

import pytest

from tests.execution import BFLOAT16, FIXTURES_DIR, FLOAT16, FLOAT32, ScriptRun, run_script

ONE_THREAD = {"AMPREWRITE_TEST_THREADS": "1", "OMP_NUM_THREADS": "1"}
ENVS = {"bfloat16": ONE_THREAD, "float16": {**ONE_THREAD, "AMPREWRITE_DTYPE": "float16"}}
EXPECTED_DTYPE = {"bfloat16": BFLOAT16, "float16": FLOAT16}
CASES = ["rule_skip_nonfinite", "rule_skip_break_return", "rule_oom_retry",
         "rule_critic_steps", "rule_optimizer_containers"]


def _run(case: str, script: str, env: dict) -> ScriptRun:
    run = run_script(FIXTURES_DIR / case / script, env=env)
    assert run.ok, run.explain()
    return run


def _finite_tail(run: ScriptRun, n: int = 6) -> float:
    finite = [loss for loss in run.losses if math.isfinite(loss)]
    return sum(finite[-n:]) / n


@pytest.fixture(scope="module")
def fp32_runs() -> dict[str, ScriptRun]:
    runs = {case: _run(case, "input.py", ONE_THREAD) for case in CASES}
    for run in runs.values():
        assert set(run.train_dtypes) == {FLOAT32}
    return runs


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", CASES)
def test_rewrite_keeps_the_protocol_on_every_path(case, dtype, fp32_runs) -> None:
    fp32 = fp32_runs[case]
    amp = _run(case, "expected_O1.py", ENVS[dtype])
    assert EXPECTED_DTYPE[dtype] in amp.train_dtypes, "the forward did not run under autocast"
    if dtype == "float16":
        assert any(amp.backward_scaled), "no loss went through an enabled GradScaler"
    # Every iteration ran (none raised); a poisoned batch may also overflow in the float16
    # forward, where the script's own `isnan(loss)` branch skips it before the backward.
    assert len(amp.losses) >= len(fp32.losses) - 2
    reference = _finite_tail(fp32)
    assert abs(_finite_tail(amp) - reference) <= 0.2 * abs(reference) + 0.05


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_skip_branches_really_run(dtype, fp32_runs) -> None:
    """The poisoned steps take the script's own skip branches (and, in float16, so may the
    first steps the loss scale overflows); training goes on after them."""
    fp32 = fp32_runs["rule_skip_nonfinite"]
    amp = _run("rule_skip_nonfinite", "expected_O1.py", ENVS[dtype])
    skipped = [int(v) for v in re.findall(r"skipped (\d+)", amp.stdout)]
    assert skipped and skipped[-1] >= 2, amp.stdout
    assert re.search(r"step 23 loss", amp.stdout), amp.stdout
    assert "step 5: non-finite" in fp32.stdout
    for case in ("rule_skip_nonfinite", "rule_skip_break_return"):
        assert "non-finite" in _run(case, "expected_O1.py", ENVS[dtype]).stdout


def test_generator_steps_every_n_critic_under_float16(fp32_runs) -> None:
    amp = _run("rule_critic_steps", "expected_O1.py", ENVS["float16"])
    lines = re.findall(r"iter (\d+) critic", amp.stdout)
    assert lines == re.findall(r"iter (\d+) critic", fp32_runs["rule_critic_steps"].stdout)


def test_a_skip_guard_reading_gradients_lets_the_scale_back_off() -> None:
    """rule_grad_read_in_if_test skips batches with non-finite gradients, testing them in the
    `if` itself. Its first float16 backward passes overflow at the initial scale: the test
    must see unscaled gradients and the skip path must update the scaler, so that the scale
    backs off. Without both (as rewritten before), every later step overflowed too: all 120
    were skipped and the model never trained."""
    amp = _run("rule_grad_read_in_if_test", "expected_O1.py", ENVS["float16"])
    skipped = amp.stdout.count("skipping a batch")
    assert 0 < skipped < 12, amp.stdout
    assert _finite_tail(amp) < 0.01 * amp.losses[0]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_o2_leaves_a_model_whose_gradients_are_read_uncast(dtype: str) -> None:
    """rule_unscale_reads_then_step_helper reads `p.grad` of the model's parameters between
    backward and step. O2's master weights would take those gradients from the model at
    `unscale_` (`p.grad` None: the read crashed); the model is left uncast, and the script
    runs to the end with the losses of FP32."""
    run = _run("rule_unscale_reads_then_step_helper", "expected_O2.py", ENVS[dtype])
    fp32 = _run("rule_unscale_reads_then_step_helper", "input.py", ENVS[dtype])
    assert run.losses == pytest.approx(fp32.losses, rel=1e-5)
