"""`amprewrite compare`: both runs of a rewritten script, side by side; clear errors otherwise."""

from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from amprewrite.compare import Run, compare, divergence, report
from tests.execution import FIXTURES_DIR, RUNTIME_DIR

TOPLEVEL = FIXTURES_DIR / "toplevel_loop"


@pytest.fixture(autouse=True)
def cpu_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH",
                       os.pathsep.join([str(RUNTIME_DIR), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    for variable in ("AMPREWRITE_OPT_LEVEL", "AMPREWRITE_DTYPE", "AMPREWRITE_DEVICE"):
        monkeypatch.delenv(variable, raising=False)


def _compare(*args: str) -> Result:
    return CliRunner().invoke(compare, list(args))


def _row(output: str, name: str) -> list[str]:
    """The cells of a table row (cells are single words except the loss scale's)."""
    line = next(line for line in output.splitlines() if line.startswith(f"{name}  "))
    return line[len(name):].split()


def test_compares_fp32_with_the_rewrite_end_to_end() -> None:
    result = _compare("--steps", "6", "--", sys.executable, str(TOPLEVEL / "expected_O1.py"))
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert _row(out, "opt level") == ["O0", "O1"]
    assert _row(out, "dtype") == ["float32", "bfloat16"]
    assert _row(out, "steps") == ["6", "6"]
    fp32_loss, amp_loss = map(float, _row(out, "final loss"))
    assert math.isfinite(fp32_loss) and math.isfinite(amp_loss)
    assert amp_loss == pytest.approx(fp32_loss, rel=0.05)  # bfloat16 follows FP32
    assert _row(out, "skipped steps") == ["0", "0"]
    assert _row(out, "loss scale first/min/last") == ["1", "/", "1", "/", "1"] * 2
    fp32_ms, unit, amp_ms, _ = _row(out, "median step time")
    assert unit == "ms" and float(fp32_ms) > 0 and float(amp_ms) > 0
    assert "loss divergence over 6 steps" in out
    speedup = re.search(r"^speedup .*: ([0-9.]+)x$", out, re.MULTILINE)
    expected = float(fp32_ms) / float(amp_ms)  # from times rounded to 3 digits
    assert speedup and float(speedup[1]) == pytest.approx(expected, rel=0.1, abs=0.01)
    assert "FP32 run" in result.stderr and "AMP run" in result.stderr


def test_a_failing_command_shows_the_end_of_its_stderr(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import sys\nprint('data directory /nonexistent missing', file=sys.stderr)\n"
                      "raise SystemExit(3)\n")
    result = _compare("--", sys.executable, str(script))
    assert result.exit_code == 1
    assert "the FP32 run of" in result.stderr and "failed with exit status 3" in result.stderr
    assert "data directory /nonexistent missing" in result.stderr
    assert isinstance(result.exception, SystemExit)  # a message, not a traceback


def test_a_script_that_is_not_rewritten_writes_no_trace() -> None:
    result = _compare("--steps", "3", "--", sys.executable, str(TOPLEVEL / "input.py"))
    assert result.exit_code == 1
    assert "exited normally but wrote no trace" in result.stderr
    assert "rewritten by amprewrite" in result.stderr


def test_a_missing_program_is_a_usage_error() -> None:
    result = _compare("--", "no-such-program-amprewrite", "train.py")
    assert result.exit_code == 2 and "cannot run 'no-such-program-amprewrite'" in result.stderr


def test_plot_without_matplotlib_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    result = _compare("--plot", "out.png", "--", sys.executable, "never-run.py")
    assert result.exit_code == 2 and "pip install 'amprewrite[plot]'" in result.stderr
    assert "FP32 run" not in result.stderr  # refused before running anything


def _records(losses: list[float], times: list[float], iterations: list[int]) -> list[dict]:
    return [{"step": i + 1, "iteration": it, "loss": loss, "scale": 1.0, "skipped": False,
             "time_s": t, "opt_level": "O1", "dtype": "bfloat16", "device": "cpu"}
            for i, (loss, t, it) in enumerate(zip(losses, times, iterations, strict=True))]


def test_divergence_skips_non_finite_losses_and_times_whole_iterations() -> None:
    fp32 = Run("FP32", _records([4.0, 2.0, 1.0, 0.5], [9.0, 0.1, 0.3, 0.2], [1, 2, 3, 4]))
    amp = Run("AMP", _records([4.0, math.nan, 1.1, 0.4], [9.0, 0.1, 0.2, 0.1], [1, 1, 2, 2]))
    found = divergence(fp32, amp)
    assert found is not None and found.steps == 3
    assert (found.max_abs_step, found.max_rel_step) == (3, 4)
    assert found.final_abs == pytest.approx(0.1) and found.final_rel == pytest.approx(0.2)
    assert fp32.median_time == pytest.approx(0.2)  # the first iteration (warm-up) left out
    assert amp.iteration_times == [0.1]  # the GAN-style iteration's last record
    text = report(fp32, amp)
    assert "non-finite losses" in text and text.endswith("2.00x")


def test_plot_draws_both_runs(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from amprewrite.compare import plot

    run = Run("FP32", _records([2.0, 1.0], [0.1, 0.1], [1, 2]))
    plot(tmp_path / "curves.png", run, Run("AMP", run.records))
    assert (tmp_path / "curves.png").read_bytes().startswith(b"\x89PNG")


def test_the_amprewrite_command_dispatches_compare(tmp_path: Path) -> None:
    import subprocess

    (tmp_path / "compare").write_text("x = 1\n")  # a file named `compare` is `./compare`
    run = subprocess.run([sys.executable, "-m", "amprewrite", "compare", "--steps", "2", "--",
                          sys.executable, "-c", "pass"], capture_output=True, text=True,
                         cwd=tmp_path, check=False)
    assert run.returncode == 1 and "exited normally but wrote no trace" in run.stderr
    run = subprocess.run([sys.executable, "-m", "amprewrite", "--check", "./compare"],
                         capture_output=True, text=True, cwd=tmp_path, check=False)
    assert run.returncode == 0 and "1 file would be left unchanged" in run.stderr
