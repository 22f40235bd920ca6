"""The execution harness (tests/execution.py) observes what a script really does."""

from __future__ import annotations

import math
import re
import shutil
import textwrap
from pathlib import Path

from tests.execution import BFLOAT16, FIXTURES_DIR, FLOAT32, RUNTIME_DIR, run_script


def _write(path: Path, source: str) -> Path:
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def test_fp32_fixture_records_losses_and_float32_forwards() -> None:
    run = run_script(FIXTURES_DIR / "mnist_functions" / "input.py")
    assert run.ok, run.explain()

    # 64 samples / batch 16 = 4 steps per epoch, 2 epochs; one backward per step.
    assert len(run.losses) == run.backward_count == 8
    assert all(math.isfinite(v) for v in run.losses)
    assert set(run.backward_dtypes) == {FLOAT32}
    assert not any(run.backward_scaled)

    # The recorded values are the script's own losses: it prints every other step's.
    printed = [float(m) for m in re.findall(r"Loss: ([0-9.]+)", run.stdout)]
    assert printed == [round(v, 6) for v in run.losses[::2]]

    # Training (grad on) and test() (under no_grad) forwards, all float32.
    assert run.train_dtypes and set(run.train_dtypes) == {FLOAT32}
    assert run.eval_dtypes and set(run.eval_dtypes) == {FLOAT32}
    assert run.grad_mode_dtypes == {"train": run.train_dtypes, "eval": run.eval_dtypes}
    assert len(run.linear_dtypes) == len(run.train_dtypes) + len(run.eval_dtypes)
    # 2 convs + 2 linears per forward: 8 train steps, 2 test passes of 1 batch.
    assert run.dtype_counts == {"train": {FLOAT32: 32}, "eval": {FLOAT32: 8}}
    assert run.autocast_forwards == 0
    assert {f[0] for f in run.forwards} == {"Conv2d", "Linear"}


def test_hand_written_autocast_is_seen_as_bfloat16(tmp_path: Path) -> None:
    source = (FIXTURES_DIR / "toplevel_loop" / "input.py").read_text(encoding="utf-8")
    forward = "        pred = model(x)\n        loss = criterion(pred, y)\n"
    assert forward in source
    source = source.replace(
        forward,
        '        with torch.autocast("cpu", dtype=torch.bfloat16):\n'
        "            pred = model(x)\n"
        "            loss = criterion(pred, y)\n",
    )
    # An evaluation forward outside autocast: it must show up as eval and float32.
    source += "\nwith torch.no_grad():\n    print('eval mse', criterion(model(X), Y).item())\n"
    script = _write(tmp_path / "input.py", source)

    run = run_script(script)
    assert run.ok, run.explain()
    assert set(run.train_dtypes) == {BFLOAT16}
    assert run.dtype_counts["train"] == {BFLOAT16: 32}  # 16 steps x 2 Linear
    assert all(f[3] for f in run.forwards if f[2])  # every training forward under autocast
    assert run.dtype_counts["eval"] == {FLOAT32: 2}
    assert len(run.losses) == 16
    assert all(math.isfinite(v) for v in run.losses)
    # mse_loss autocasts to float32, so the loss itself stays float32.
    assert set(run.backward_dtypes) == {FLOAT32}
    assert f"{run.losses[-1]:.4f}" in run.stdout  # "done, final loss ..."


def test_raising_script_keeps_traceback_and_what_ran_before(tmp_path: Path) -> None:
    script = _write(
        tmp_path / "boom.py",
        """
        import torch

        w = torch.ones(3, requires_grad=True)
        (w * 2.5).sum().backward()

        def explode():
            raise ValueError("exploded on purpose")

        explode()
        """,
    )
    run = run_script(script)
    assert run.returncode != 0
    assert not run.ok
    assert run.error_type == "ValueError"
    assert run.error is not None
    assert "exploded on purpose" in run.error and "explode()" in run.error
    assert "exploded on purpose" in run.stderr
    assert run.losses == [7.5]  # recorded before the raise


def test_argv_exit_status_paths_and_direct_autograd_backward(tmp_path: Path) -> None:
    _write(tmp_path / "helper_mod.py", "VALUE = 41\n")
    script = _write(
        tmp_path / "cli.py",
        """
        import os
        import sys

        import torch
        from helper_mod import VALUE  # a sibling module, as `python cli.py` allows

        assert __name__ == "__main__"
        assert os.path.basename(__file__) == "cli.py"
        assert sys.argv[1:] == ["--flag", "two words"], sys.argv
        print("runtime on path:", RUNTIME_PATH in sys.path)
        assert not torch.cuda.is_available()

        a = torch.tensor(2.0, requires_grad=True)
        (a * a).backward()                        # 4.0
        torch.autograd.backward(a * 3)           # 6.0, recorded once
        torch.autograd.backward([a.expand(2) * 1.0], [torch.ones(2)])  # non-scalar
        sys.exit(VALUE - 38)
        """.replace("RUNTIME_PATH", repr(str(RUNTIME_DIR))),
    )
    run = run_script(script, ["--flag", "two words"])
    assert run.returncode == 3, run.explain()
    assert run.error is None
    assert "runtime on path: True" in run.stdout
    assert run.losses == [4.0, 6.0]
    assert run.backward_count == 3


def test_enabled_grad_scaler_loss_is_recorded_unscaled(tmp_path: Path) -> None:
    script = _write(
        tmp_path / "scaled.py",
        """
        import torch

        # No optimizer: building one imports torch._dynamo (~1.5 s), not needed here.
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 1)
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        assert scaler.is_enabled()
        x, y = torch.randn(8, 4), torch.randn(8, 1)
        for _ in range(2):
            loss = torch.nn.functional.mse_loss(model(x), y)
            scaled = scaler.scale(loss)
            assert torch.allclose(scaled, loss * 1024.0)
            scaled.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.1 * p.grad / 1024.0
                    p.grad = None
            print(f"loss {loss.item():.6f}")
        """,
    )
    run = run_script(script)
    assert run.ok, run.explain()
    printed = [float(m) for m in re.findall(r"loss ([0-9.]+)", run.stdout)]
    assert len(run.losses) == 2
    assert [round(v, 6) for v in run.losses] == printed
    assert run.backward_scaled == [True, True]


def test_timeout_is_reported(tmp_path: Path) -> None:
    script = _write(tmp_path / "slow.py", "import time\ntime.sleep(60)\n")
    run = run_script(script, timeout=1)
    assert run.timed_out and not run.ok
    assert run.returncode == -9
    assert "timed out" in run.stderr


def test_copy_of_fixture_runs_from_elsewhere(tmp_path: Path) -> None:
    # Rewritten scripts are written to temporary directories: the harness must not depend
    # on the script living under fixtures/.
    target = tmp_path / "copy.py"
    shutil.copy(FIXTURES_DIR / "no_training_step" / "input.py", target)
    run = run_script(target)
    assert run.ok, run.explain()
    assert run.losses == [] and run.linear_dtypes == []
    assert "one-hot ok" in run.stdout


STEPPING = """
import sys

import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, enabled=sys.argv[1] == "scaled")
x, y = torch.randn(8, 4), torch.randn(8, 1)
for i in range(6):
    optimizer.zero_grad()
    scaler.scale(torch.nn.functional.mse_loss(model(x), y)).backward()
    if i == 4:  # a skip branch: unscaled, then abandoned
        scaler.unscale_(optimizer)
        scaler.update()
        continue
    scale = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    if scaler.get_scale() >= scale:  # the scheduler guard
        scheduler.step()
print("finite weights:", bool(torch.isfinite(model.weight).all()))
"""


def test_overflow_injection_is_skipped_by_an_enabled_scaler(tmp_path: Path) -> None:
    script = _write(tmp_path / "stepping.py", STEPPING)
    clean = run_script(script, ["scaled"])
    run = run_script(script, ["scaled"], overflow_at=3)
    assert clean.ok and run.ok, run.explain()
    assert clean.overflow_at is None and clean.overflow_injected_at is None
    assert clean.optimizer_steps == run.optimizer_steps == 6  # 5 steps, 1 abandoned unscale_
    assert clean.skipped_at == [5]  # the skip branch's attempt
    assert run.overflow_at == run.overflow_injected_at == 3
    assert run.skipped_at == [3, 5] and run.optimizer_steps_taken == 4
    assert clean.scales == [1024.0] * 6  # one update() per iteration
    assert run.scales == [1024.0, 1024.0, 512.0, 512.0, 512.0, 512.0]  # backed off once
    assert clean.scheduler_steps == 5 and run.scheduler_steps == 4  # the guard held
    assert "finite weights: True" in run.stdout
    assert all(math.isfinite(v) for v in run.losses)


def test_overflow_injection_without_a_scaler_reaches_the_weights(tmp_path: Path) -> None:
    """A disabled scaler passes `opt.step()` through: the attempts are counted the same, and
    the inf is not caught (so the tests inject float16 runs only)."""
    script = _write(tmp_path / "stepping.py", STEPPING)
    run = run_script(script, ["plain"], overflow_at=2)
    assert run.ok, run.explain()
    assert run.optimizer_steps == run.optimizer_steps_taken == 5  # no scaler, no unscale_
    assert run.overflow_injected_at == 2 and run.skipped_at == [] and run.scales == []
    assert "finite weights: False" in run.stdout
