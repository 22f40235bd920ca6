"""Rewrites with constants float16 cannot hold run on the CPU in float16 and bfloat16.

`AMPREWRITE_DTYPE=float16` makes the runtime's CPU autocast run matmuls and `nn.Linear` in
float16 (as CUDA autocast does), so `scores.masked_fill(mask, -1e9)` on attention scores
raises here exactly as on a GPU: "value cannot be converted to type c10::Half without
overflow". The rewrite fills with `torch.finfo(scores.dtype).min` instead.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.execution import BFLOAT16, FIXTURES_DIR, FLOAT16, FLOAT32, run_script

ATTENTION = FIXTURES_DIR / "attention_mask_fill"
DTYPES = {"float16": FLOAT16, "bfloat16": BFLOAT16}


@pytest.fixture(scope="module")
def fp32_losses() -> list[float]:
    run = run_script(ATTENTION / "input.py")
    assert run.ok, run.explain()
    assert set(run.train_dtypes) == {FLOAT32}
    return run.losses


@pytest.mark.parametrize("dtype", DTYPES)
def test_masked_attention_trains_in_low_precision_like_fp32(
    dtype: str, fp32_losses: list[float]
) -> None:
    run = run_script(ATTENTION / "expected_O1.py", env={"AMPREWRITE_DTYPE": dtype})
    assert run.ok, run.explain()
    assert DTYPES[dtype] in run.train_dtypes, "the attention did not run in low precision"
    assert len(run.losses) == len(fp32_losses)
    assert all(math.isfinite(loss) for loss in run.losses)
    assert run.losses[-1] == pytest.approx(fp32_losses[-1], rel=0.1, abs=1e-2)


def test_the_original_fill_raises_under_float16_autocast(tmp_path: Path) -> None:
    """The premise: the rewrite with the author's `-1e9` kept crashes in float16."""
    rewritten = (ATTENTION / "expected_O1.py").read_text()
    kept = rewritten.replace("torch.finfo(att.dtype).min", "-1e9")
    assert kept != rewritten
    script = tmp_path / "kept_fill.py"
    script.write_text(kept)
    run = run_script(script, env={"AMPREWRITE_DTYPE": "float16"})
    assert not run.ok
    assert "cannot be converted to type c10::Half without overflow" in (run.error or run.stderr)
