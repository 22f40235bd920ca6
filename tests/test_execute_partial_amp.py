"""A script whose only autocast covers evaluation trained in FP32: its rewrite trains in low
precision, keeps the author's bfloat16 evaluation autocast, and learns like FP32."""

from __future__ import annotations

import math

import pytest

from tests.execution import BFLOAT16, FIXTURES_DIR, FLOAT16, FLOAT32, run_script

EVAL_ONLY = FIXTURES_DIR / "partial_amp_eval_only"
DTYPES = {"float16": FLOAT16, "bfloat16": BFLOAT16}


@pytest.mark.parametrize("dtype", DTYPES)
def test_eval_only_autocast_script_now_trains_in_low_precision(dtype: str) -> None:
    fp32 = run_script(EVAL_ONLY / "input.py")
    amp = run_script(EVAL_ONLY / "expected_O1.py", env={"AMPREWRITE_DTYPE": dtype})
    assert fp32.ok, fp32.explain()
    assert amp.ok, amp.explain()
    assert set(fp32.train_dtypes) == {FLOAT32}, "the input trains in FP32"
    assert set(fp32.eval_dtypes) == {BFLOAT16}, "the input evaluates under its own autocast"
    assert set(amp.train_dtypes) == {DTYPES[dtype]}, "the training step was not rewritten"
    assert set(amp.eval_dtypes) == {BFLOAT16}, "the author's evaluation autocast changed"
    assert len(amp.losses) == len(fp32.losses) > 0
    assert all(math.isfinite(loss) for loss in amp.losses)
    assert amp.losses[-1] == pytest.approx(fp32.losses[-1], rel=0.1, abs=2e-2)
