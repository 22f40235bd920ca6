"""`amprewrite compare`: both runs of a rewritten script, side by side; clear errors otherwise."""

from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from amprewrite.compare import (
    CompareError,
    Run,
    compare,
    device_notes,
    divergence,
    refuse_before_running,
    report,
    verdict,
)
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
    assert re.search(r"^device: .+ \(cpu[;)]", out, re.MULTILINE)  # traced by the runtime


def test_a_failing_command_shows_the_end_of_its_stderr(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import sys\nimport amprewrite_runtime\n"
                      "print('data directory /nonexistent missing', file=sys.stderr)\n"
                      "raise SystemExit(3)\n")
    result = _compare("--", sys.executable, str(script))
    assert result.exit_code == 1
    assert "the FP32 run of" in result.stderr and "failed with exit status 3" in result.stderr
    assert "data directory /nonexistent missing" in result.stderr
    assert isinstance(result.exception, SystemExit)  # a message, not a traceback


def test_a_script_that_is_not_rewritten_is_refused_before_running() -> None:
    script = str(TOPLEVEL / "input.py")
    result = _compare("--steps", "3", "--", sys.executable, script)
    assert result.exit_code == 2
    assert f"`{script}` does not import amprewrite_runtime" in result.stderr
    assert f"rewrite it first with `amprewrite {script}`" in result.stderr
    assert "FP32 run" not in result.stderr  # failed fast: the FP32 job never ran


def test_a_script_whose_imported_module_uses_the_runtime_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("from trainer.loop import fit\nfit()\n")
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "__init__.py").write_text("")
    (tmp_path / "trainer" / "loop.py").write_text("from amprewrite_runtime import GradScaler\n")
    refuse_before_running([sys.executable, str(tmp_path / "train.py")])  # no error
    (tmp_path / "trainer" / "loop.py").write_text("import torch\n")
    with pytest.raises(CompareError, match="does not import amprewrite_runtime"):
        refuse_before_running([sys.executable, str(tmp_path / "train.py")])


def test_a_script_named_as_the_command_gets_the_python_fix(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("from amprewrite_runtime import GradScaler\n")
    result = _compare("--steps", "3", str(script), "--lr", "0.1")
    assert result.exit_code == 2
    assert (f"`{script}` is a file, not a command: run it with Python, "
            f"`amprewrite compare -- python {script} --lr 0.1`") in result.stderr


def test_a_missing_program_is_a_usage_error() -> None:
    result = _compare("--", "no-such-program-amprewrite", "train.py")
    assert result.exit_code == 2 and "cannot run 'no-such-program-amprewrite'" in result.stderr


def test_plot_without_matplotlib_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    result = _compare("--plot", "out.png", "--", sys.executable, "never-run.py")
    from amprewrite.install_source import install_command

    assert result.exit_code == 2 and install_command("plot") in result.stderr
    assert "[plot]'" in result.stderr
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


def test_plot_draws_both_runs_distinctly_under_a_title(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib import pyplot

    from amprewrite.compare import plot

    figures = []
    monkeypatch.setattr(pyplot, "close", figures.append)
    run = Run("FP32", _records([2.0, 1.0, 0.5], [0.1, 0.1, 0.1], [1, 2, 3]))
    amp = Run("AMP", run.records)  # identical losses: the FP32 curve must still show
    plot(tmp_path / "curves.png", run, amp, "amprewrite compare --steps 3 -- python train.py")
    assert (tmp_path / "curves.png").read_bytes().startswith(b"\x89PNG")
    [figure] = figures
    losses, scales = figure.axes
    styles = {(line.get_linestyle(), line.get_marker(), line.get_color())
              for line in losses.get_lines()}
    assert len(styles) == 2 and len({marker for _, marker, _ in styles}) == 2
    title = figure._suptitle.get_text()
    assert "amprewrite compare --steps 3 -- python train.py" in title and "3 optimizer" in title
    figure.canvas.draw()
    ticks = [tick for tick in scales.get_xticks() if 1 <= tick <= 3]
    assert ticks and all(float(tick).is_integer() for tick in ticks)  # no step 1.5
    assert any("bfloat16 has float32's range" in text.get_text() for text in scales.texts)


def _device(records: list[dict], **device: object) -> Run:
    return Run("AMP", [{**r, **device} for r in records])


def test_device_notes_say_what_the_device_offers_and_why_amp_is_slower() -> None:
    records = _records([1.0], [0.1], [1])
    plain = _device(records, device_name="AMD EPYC", device_features=[], fast_dtypes=[])
    notes = device_notes(plain, 0.7)
    assert notes[0] == ("device: AMD EPYC (cpu): no AMX-BF16 or AVX-512 BF16, so bfloat16 is "
                        "not accelerated and may be slower than float32")
    assert notes[1].startswith("AMP is slower here, as expected")
    assert len(device_notes(plain, 1.3)) == 1
    amx = _device(records, device_name="Intel Xeon", device_features=["AMX-BF16"],
                  fast_dtypes=["bfloat16"])
    assert device_notes(amx, 2.0) == [
        "device: Intel Xeon (cpu; AMX-BF16): fast bfloat16 (AMX-BF16 or AVX-512 BF16)"]
    assert "although the device computes bfloat16 fast" in device_notes(amx, 0.9)[1]
    unknown = _device(records, device_name="arm", device_features=[], fast_dtypes=None)
    assert device_notes(unknown, 0.9) == [
        "device: arm (cpu): whether it has AMX-BF16 or AVX-512 BF16 is unknown"]
    gpu = [{**r, "device": "cuda", "dtype": "float16"} for r in records]
    old_gpu = _device(gpu, device_name="Tesla P100", device_features=["compute capability 6.0"],
                      fast_dtypes=[])
    assert "no tensor cores (compute capability 7.0 or newer)" in device_notes(old_gpu, 0.8)[0]


def test_the_trace_records_the_device_and_its_fast_dtypes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from amprewrite_runtime import trace

    monkeypatch.setattr(trace, "_cpu", lambda: ("Intel Xeon", {"avx512f", "amx_bf16",
                                                               "avx512_fp16"}))
    assert trace.device_info("cpu") == {"device_name": "Intel Xeon",
                                        "device_features": ["AMX-BF16", "AVX-512 FP16"],
                                        "fast_dtypes": ["bfloat16", "float16"]}
    monkeypatch.setattr(trace, "_cpu", lambda: ("M2", None))
    assert trace.device_info("cpu")["fast_dtypes"] is None
    monkeypatch.setattr(trace.torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(trace.torch.cuda, "get_device_capability", lambda index: (7, 5))
    monkeypatch.setattr(trace.torch.cuda, "get_device_name", lambda index: "Tesla T4")
    assert trace.device_info("cuda") == {"device_name": "Tesla T4",
                                         "device_features": ["compute capability 7.5"],
                                         "fast_dtypes": ["float16"]}


@pytest.mark.slow
def test_compares_a_framework_rewrite() -> None:
    """An Accelerate script the tool rewrote (`Accelerator(mixed_precision=
    accelerate_mixed_precision())`): the FP32 run is FP32 (AMPREWRITE_OPT_LEVEL=O0 turns the
    switch off) and both runs are traced through the framework's own optimizer steps."""
    pytest.importorskip("accelerate")
    script = FIXTURES_DIR / "framework_accelerate_script" / "expected_O1.py"
    result = _compare("--steps", "3", "--", sys.executable, str(script))
    assert result.exit_code == 0, result.output
    assert _row(result.stdout, "opt level") == ["O0", "O1"]
    assert _row(result.stdout, "dtype") == ["float32", "bfloat16"]
    assert _row(result.stdout, "steps") == ["3", "3"]
    fp32_loss, amp_loss = map(float, _row(result.stdout, "final loss"))
    assert amp_loss == pytest.approx(fp32_loss, rel=0.05)


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


NOTEBOOK = FIXTURES_DIR / "notebooks" / "split_cells"


def test_compares_a_rewritten_notebook_named_alone(tmp_path: Path) -> None:
    import nbformat

    notebook = nbformat.read(NOTEBOOK / "expected_O1.ipynb", as_version=4)
    notebook.cells.insert(0, nbformat.v4.new_code_cell("%matplotlib inline\n!echo kernel-only"))
    notebook.cells.insert(1, nbformat.v4.new_code_cell("%%bash\necho not python"))
    path = tmp_path / "train.ipynb"
    nbformat.write(notebook, path)
    result = _compare("--steps", "4", str(path))
    assert result.exit_code == 0, result.output
    assert _row(result.stdout, "opt level") == ["O0", "O1"]
    assert _row(result.stdout, "steps") == ["4", "4"]
    fp32_loss, amp_loss = map(float, _row(result.stdout, "final loss"))
    assert amp_loss == pytest.approx(fp32_loss, rel=0.05)


def test_a_notebook_run_in_a_kernel_is_refused_with_the_fix() -> None:
    notebook = str(NOTEBOOK / "expected_O1.ipynb")
    result = _compare("--", "jupyter", "nbconvert", "--execute", notebook)
    assert result.exit_code == 2 and "a kernel catches the step cap's SystemExit" in result.stderr
    assert f"run `amprewrite compare {notebook}` instead" in result.stderr


def test_a_notebook_that_is_not_rewritten_is_refused_before_running() -> None:
    result = _compare(str(NOTEBOOK / "input.ipynb"))
    assert result.exit_code == 2 and "does not import amprewrite_runtime" in result.stderr
    assert "FP32 run" not in result.stderr


def _run_of(label: str, losses: list[float]) -> Run:
    return Run(label, [{"step": i + 1, "loss": loss} for i, loss in enumerate(losses)])


def test_the_verdict_judges_the_late_losses_and_non_finite_ones() -> None:
    fp32 = _run_of("FP32", [4.0, 3.0, 2.0, 1.5, 1.2, 1.0, 0.9, 0.8])
    close = _run_of("AMP", [4.5, 3.3, 2.1, 1.5, 1.2, 1.02, 0.91, 0.8])  # early noise, late same
    assert verdict(fp32, close, 0.10) is None
    stalled = _run_of("AMP", [4.0, 3.6, 3.5, 3.5, 3.4, 3.4, 3.3, 3.3])  # stopped learning
    assert "off FP32's" in (verdict(fp32, stalled, 0.10) or "")
    assert verdict(fp32, stalled, 5.0) is None  # a tolerance wide enough
    broken = _run_of("AMP", [4.0, 3.0, math.nan, 1.5, 1.2, 1.0, 0.9, 0.8])
    assert verdict(fp32, broken, 0.10) == "the AMP loss is not finite at step 3, where FP32's is"


def test_a_run_that_diverges_fails_with_its_reason(tmp_path: Path) -> None:
    script = tmp_path / "train.py"  # FP32 learns; the AMP run's loss stays where it started
    script.write_text(
        "import os\nimport torch\nfrom amprewrite_runtime import GradScaler\n"
        "model = torch.nn.Linear(4, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "scaler = GradScaler(opt_level='O1')\n"
        "learns = os.environ.get('AMPREWRITE_OPT_LEVEL') == 'O0'\n"
        "x, y = torch.randn(32, 4), torch.randn(32, 1)\n"
        "for _ in range(30):\n"
        "    loss = ((model(x) - y) ** 2).mean()\n"
        "    scaler.scale(loss).backward()\n"
        "    if not learns:\n"
        "        optimizer.zero_grad()\n"
        "    scaler.step(optimizer)\n"
        "    scaler.update()\n"
        "    optimizer.zero_grad()\n")
    result = _compare("--steps", "20", "--", sys.executable, str(script))
    assert result.exit_code == 1, result.output
    assert "verdict: diverged: the AMP loss over the last 5 steps is" in result.stdout
    assert "the AMP run diverged from FP32" in result.stderr


def test_both_runs_start_from_the_same_seed(tmp_path: Path) -> None:
    script = tmp_path / "train.py"  # a model drawn without a seed of the script's own
    script.write_text(
        "import torch\nfrom amprewrite_runtime import GradScaler, autocast\n"
        "model = torch.nn.Linear(8, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.01)\n"
        "scaler = GradScaler(opt_level='O1')\n"
        "for _ in range(10):\n"
        "    x = torch.randn(16, 8)\n"
        "    with autocast():\n"
        "        loss = model(x).pow(2).mean()\n"
        "    scaler.scale(loss).backward()\n"
        "    scaler.step(optimizer)\n"
        "    scaler.update()\n"
        "    optimizer.zero_grad()\n")
    result = _compare("--steps", "4", "--seed", "7", "--", sys.executable, str(script))
    assert result.exit_code == 0, result.output
    per_step = re.findall(r"^  ([1-4])  +(\S+)  +(\S+)  ", result.stdout, re.MULTILINE)
    assert [step for step, _, _ in per_step] == ["1", "2", "3", "4"]
    for _, fp32_loss, amp_loss in per_step:  # unseeded, the two models differ (0.26-0.44)
        assert float(amp_loss) == pytest.approx(float(fp32_loss), rel=0.02)
    assert "verdict: the AMP run trains like FP32" in result.stdout


def test_the_runtime_seeds_where_the_environment_says(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from amprewrite_runtime.trace import seed_from_environment

    monkeypatch.delenv("AMPREWRITE_SEED", raising=False)
    assert seed_from_environment() is None
    monkeypatch.setenv("AMPREWRITE_SEED", "7")
    assert seed_from_environment() == 7
    drawn = torch.rand(3)
    torch.manual_seed(7)
    assert torch.equal(drawn, torch.rand(3))
    monkeypatch.setenv("AMPREWRITE_SEED", "seven")
    with pytest.raises(ValueError, match="AMPREWRITE_SEED='seven' is not valid"):
        seed_from_environment()
