"""Training-loop shapes that need more than autocast: the rewrites run, and run right.

Each fixture's FP32 `input.py` and its `expected_O1.py` run in CPU subprocesses (see
`tests/execution.py`). Besides "bfloat16 really ran in the training forward" and "the loss is
close to FP32", every case checks the behaviour its rewrite exists for, mostly under
`AMPREWRITE_DTYPE=float16`, where the runtime turns dynamic loss scaling on (on the CPU too):
unscaled gradients before clipping and logging, one scale per accumulated step, one
`update()` after the last of two optimizers, the scaler's state in checkpoints, an LR schedule
that follows the steps really taken, custom autograd Functions, and DDP worker processes.
Every rewrite runs in bfloat16 and in float16, and (but DDP, whose workers the harness does
not observe) once more in float16 with an overflow injected midway (`overflow_at`): exactly
that step is skipped, the script's own schedule skips with it, and it trains on like its FP32
twin (the FP32 run whose steps at the float16 run's skipped attempts change nothing).
"""

from __future__ import annotations

import math
import re
import socket
from collections import Counter
from pathlib import Path

import pytest
import torch

from tests.execution import (
    BFLOAT16,
    FIXTURES_DIR,
    FLOAT16,
    FLOAT16_ENV,
    FLOAT32,
    ONE_THREAD,
    TESTS_DIR,
    Job,
    ScriptRun,
    assert_survives_overflow,
    fp32_twin,
    overflow_step,
    run_script,
)

FP16 = {**ONE_THREAD, **FLOAT16_ENV}  # loss scaling on, on the CPU
MULTIPROC_DIR = TESTS_DIR / "_multiproc"  # holds the sitecustomize.py the DDP test uses


def _fp32(case: str, args: tuple[str, ...] = ()) -> ScriptRun:
    run = Job.of(FIXTURES_DIR / case / "input.py", args).run()  # once per session
    assert run.ok, run.explain()
    assert run.train_dtypes and set(run.train_dtypes) == {FLOAT32}
    return run


def _amp(case: str, args: tuple[str, ...] = (), env: dict | None = None) -> ScriptRun:
    run = Job.of(FIXTURES_DIR / case / "expected_O1.py", args, env).run()  # once per session
    assert run.ok, run.explain()
    assert all(math.isfinite(loss) for loss in run.losses), run.losses
    return run


def _assert_bf16_training(run: ScriptRun) -> None:
    assert BFLOAT16 in run.train_dtypes, "the training forward did not run under autocast"


def _assert_fp16_training(run: ScriptRun) -> None:
    assert FLOAT16 in run.train_dtypes, "AMPREWRITE_DTYPE=float16 was not honoured"
    assert any(run.backward_scaled), "no loss went through an enabled GradScaler"


def _twin(case: str, args: tuple[str, ...], fp16: ScriptRun) -> ScriptRun:
    """The FP32 run that skips the steps `fp16` skipped."""
    run = fp32_twin(Job.of(FIXTURES_DIR / case / "input.py", args), fp16).run()
    assert run.ok, run.explain()
    return run


def _floats(pattern: str, text: str) -> list[float]:
    return [float(v) for v in re.findall(pattern, text)]


def _mean_tail(values: list[float], n: int = 8) -> float:
    tail = values[-n:]
    return sum(tail) / len(tail)


# 1. clip_and_grad_norm ------------------------------------------------------------------
# `if args.clip: clip_grad_norm_(...)`, then a log line computing the norm of `p.grad`,
# between backward and step. Both need true gradients: `scaler.unscale_(optimizer)` must run
# before the `if`, whether clipping is on or not.

CLIP = "clip_and_grad_norm"
GRAD_NORM = r"grad_norm ([0-9.]+)"


@pytest.fixture(scope="module")
def clip_fp32() -> dict[str, ScriptRun]:
    return {c: _fp32(CLIP, ("--clip", c)) for c in ("1.0", "0")}


def test_clip_rewrite_trains_in_bf16_like_fp32(clip_fp32) -> None:
    fp32 = clip_fp32["1.0"]
    amp = _amp(CLIP, ("--clip", "1.0"))
    _assert_bf16_training(amp)
    assert len(amp.losses) == len(fp32.losses) == 24
    # bfloat16 keeps ~3 significant digits; over 24 SGD steps the loss drifts by < 2 %
    assert amp.losses[-1] == pytest.approx(fp32.losses[-1], rel=0.03)


def test_clipping_under_fp16_loss_scaling_clips_true_gradients(clip_fp32) -> None:
    """Clipping on (max norm 1.0 is reached in 5 of 24 steps): with float16 the gradients
    are 65536x scaled after backward, so without `unscale_` clipping would shrink every
    step to 1/65536 of its size and the loss would not go down like FP32's."""
    fp32 = clip_fp32["1.0"]
    amp = _amp(CLIP, ("--clip", "1.0"), env=FP16)
    _assert_fp16_training(amp)
    norms32, norms16 = _floats(GRAD_NORM, fp32.stdout), _floats(GRAD_NORM, amp.stdout)
    assert len(norms16) == len(norms32) == 24
    assert max(norms32) == pytest.approx(1.0)  # clipping really was active in FP32 ...
    assert norms16 == pytest.approx(norms32, rel=0.02)  # ... and acts the same in float16
    assert amp.losses[-1] == pytest.approx(fp32.losses[-1], rel=0.03)


def test_grad_norm_logging_under_fp16_sees_true_gradients_without_clipping(clip_fp32) -> None:
    fp32 = clip_fp32["0"]
    amp = _amp(CLIP, ("--clip", "0"), env=FP16)
    _assert_fp16_training(amp)
    norms32, norms16 = _floats(GRAD_NORM, fp32.stdout), _floats(GRAD_NORM, amp.stdout)
    assert len(norms16) == len(norms32) == 24
    # float16 gradients of a few-digit precision; without unscale_ they are ~65536x larger
    assert norms16 == pytest.approx(norms32, rel=0.02)


# 2. grad_accumulation -------------------------------------------------------------------
# `loss = loss / accum_steps; loss.backward()` per micro-batch; step/update/zero_grad every
# accum_steps. 3 epochs x 32 micro-batches, 24 optimizer steps.

ACCUM = "grad_accumulation"
UPDATE_LOSS = r"update \d+ loss ([0-9.]+)"


@pytest.fixture(scope="module")
def accum_fp32() -> ScriptRun:
    return _fp32(ACCUM)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_accumulation_rewrite_matches_fp32(accum_fp32, dtype: str) -> None:
    env = FP16 if dtype == "float16" else ONE_THREAD
    amp = _amp(ACCUM, env=env)
    if dtype == "float16":
        _assert_fp16_training(amp)
    else:
        _assert_bf16_training(amp)
    fp32 = accum_fp32
    assert amp.backward_count == fp32.backward_count == 96  # one backward per micro-batch
    updates32, updates = _floats(UPDATE_LOSS, fp32.stderr), _floats(UPDATE_LOSS, amp.stderr)
    assert len(updates) == len(updates32) == 24  # one optimizer step per 4 micro-batches
    assert updates32[-1] < updates32[0]  # the FP32 baseline learns
    # the micro-batch losses (already divided by accum_steps) agree step by step at the end
    assert _mean_tail(amp.losses) == pytest.approx(_mean_tail(fp32.losses), rel=0.03)
    assert updates[-1] == pytest.approx(updates32[-1], rel=0.03)


# 3. multitask_retain_graph --------------------------------------------------------------
# trunk + two heads, `loss_cls.backward(retain_graph=True)`, `loss_reg.backward()`, one
# optimizer; then a probe on the detached features with its own optimizer, stepped after it.
# scaler.update() must come once, after the probe's step.

MULTI = "multitask_retain_graph"
MULTI_LINE = r"step +(\d+) cls ([0-9.]+) reg ([0-9.]+) probe ([0-9.]+)"


@pytest.fixture(scope="module")
def multi_fp32() -> ScriptRun:
    return _fp32(MULTI)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_multitask_rewrite_matches_fp32(multi_fp32, dtype: str) -> None:
    amp = run_script(FIXTURES_DIR / MULTI / "expected_O1.py",
                     env=FP16 if dtype == "float16" else ONE_THREAD)
    assert amp.ok, amp.explain()
    if dtype == "float16":
        _assert_fp16_training(amp)
    else:
        _assert_bf16_training(amp)
    fp32 = multi_fp32
    # three scalar backwards per step (cls, reg, probe), 40 steps
    assert len(amp.losses) == len(fp32.losses) == 120
    assert all(math.isfinite(v) for v in amp.losses)
    for index in range(3):  # cls, reg and probe, each averaged over the last 8 steps
        got = _mean_tail(amp.losses[index::3])
        want = _mean_tail(fp32.losses[index::3])
        assert got == pytest.approx(want, rel=0.03), (index, got, want)
    # the printed last-step losses agree too
    last32 = re.findall(MULTI_LINE, fp32.stdout)[-1]
    last = re.findall(MULTI_LINE, amp.stdout)[-1]
    assert last[0] == last32[0] == "39"
    assert [float(v) for v in last[1:]] == pytest.approx([float(v) for v in last32[1:]],
                                                         rel=0.03)


# 4. checkpoint_resume -------------------------------------------------------------------
# main() resumes from `--resume PATH` and saves every epoch through save_checkpoint(state,
# path); 8 optimizer steps per epoch. Under float16 the first steps overflow, so the saved
# loss scale is below the initial 65536, which makes a restored scale observable.

CKPT = "checkpoint_resume"
EPOCH_LOSS = r"epoch (\d+) avg loss ([0-9.]+)"
STEPS_PER_EPOCH = 8


def _load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def test_fp32_checkpoint_resumes_in_the_rewritten_script(tmp_path: Path) -> None:
    """A checkpoint written before the rewrite has no "scaler" entry: resuming from it just
    works, in bfloat16, and continues like the FP32 script would."""
    fp32_ckpt = tmp_path / "fp32" / "ckpt.pt"
    _fp32(CKPT, ("--epochs", "2", "--checkpoint", str(fp32_ckpt)))
    saved = _load(fp32_ckpt)
    assert saved["epoch"] == 1 and "scaler" not in saved

    args = ("--epochs", "4", "--resume", str(fp32_ckpt))
    fp32 = _fp32(CKPT, (*args, "--checkpoint", str(tmp_path / "fp32-resumed.pt")))
    amp_ckpt = tmp_path / "amp-resumed.pt"
    amp = _amp(CKPT, (*args, "--checkpoint", str(amp_ckpt)))
    _assert_bf16_training(amp)
    assert "resumed from" in amp.stdout
    epochs32, epochs = re.findall(EPOCH_LOSS, fp32.stdout), re.findall(EPOCH_LOSS, amp.stdout)
    assert [e for e, _ in epochs] == [e for e, _ in epochs32] == ["2", "3"]
    assert len(amp.losses) == len(fp32.losses) == 2 * STEPS_PER_EPOCH
    # it starts from the trained weights: its first loss is the FP32 resumed run's first loss
    assert amp.losses[0] == pytest.approx(fp32.losses[0], rel=0.01)
    assert float(epochs[-1][1]) == pytest.approx(float(epochs32[-1][1]), rel=0.03)
    resumed = _load(amp_ckpt)
    assert resumed["epoch"] == 3 and "scaler" in resumed  # the rewrite now saves it


def test_rewritten_checkpoint_restores_the_fp16_loss_scale(tmp_path: Path) -> None:
    first, second = tmp_path / "first.pt", tmp_path / "second.pt"
    amp = _amp(CKPT, ("--epochs", "2", "--checkpoint", str(first)), env=FP16)
    _assert_fp16_training(amp)
    saved = _load(first)
    assert set(saved) == {"epoch", "model", "optimizer", "scaler"}
    state = saved["scaler"]
    assert state["opt_level"] == "O1"
    assert state["skipped_steps"] > 0 and state["scale"] < 2.0**16  # it did back off

    resumed = _amp(CKPT, ("--epochs", "4", "--resume", str(first), "--checkpoint", str(second)),
                   env=FP16)
    assert "resumed from" in resumed.stdout
    after = _load(second)["scaler"]
    # no step overflows at the restored scale, so the scale is the saved one and the growth
    # tracker carried on counting; a scaler that started afresh at 65536 would have skipped
    # steps again and counted from its last skip.
    assert after["scale"] == state["scale"]
    assert after["skipped_steps"] == state["skipped_steps"]
    assert after["growth_tracker"] == state["growth_tracker"] + 2 * STEPS_PER_EPOCH


# 4b. rule_checkpoint_restorers --------------------------------------------------------------
# A keyword-driven restorer (`restart_from_checkpoint(path, model=..., optimizer=...)`), or,
# with `--pickled`, the model and optimizer objects pickled and resumed by assignment; 8
# optimizer steps per epoch.

RESTORERS = "rule_checkpoint_restorers"


@pytest.mark.parametrize("mode", [(), ("--pickled",)], ids=["keywords", "pickled"])
def test_every_restorer_restores_the_fp16_loss_scale(mode: tuple[str, ...], tmp_path: Path) -> None:
    first, second = tmp_path / "first.pt", tmp_path / "second.pt"
    amp = _amp(RESTORERS, (*mode, "--epochs", "2", "--checkpoint", str(first)), env=FP16)
    _assert_fp16_training(amp)
    state = torch.load(first, map_location="cpu", weights_only=False)["scaler"]
    assert state["skipped_steps"] > 0 and state["scale"] < 2.0**16  # it did back off
    args = (*mode, "--epochs", "4", "--resume", str(first), "--checkpoint", str(second))
    resumed = _amp(RESTORERS, args, env=FP16)
    after = torch.load(second, map_location="cpu", weights_only=False)["scaler"]
    # a scaler that started afresh at 65536 would have skipped steps again
    assert (after["scale"], after["skipped_steps"]) == (state["scale"], state["skipped_steps"])
    assert after["growth_tracker"] == state["growth_tracker"] + 2 * STEPS_PER_EPOCH
    # the FP32 script resumes from the same checkpoint (it ignores the scaler's entry): so
    # does the rewrite, in float16 (keywords) and in bfloat16 (pickled)
    fp32_job = Job.of(FIXTURES_DIR / RESTORERS / "input.py", args)
    if not mode:
        fp32 = fp32_twin(fp32_job, resumed).run()
        assert fp32.ok, fp32.explain()
        assert resumed.losses[-1] == pytest.approx(fp32.losses[-1], rel=0.02)
    else:
        bf16 = _amp(RESTORERS, (*args[:-1], str(tmp_path / "third.pt")))
        _assert_bf16_training(bf16)
        assert bf16.losses[-1] == pytest.approx(fp32_job.run().losses[-1], rel=0.05)


# 5. custom_autograd_function ------------------------------------------------------------
# a hand-written linear layer: torch.autograd.Function whose backward does matmuls on the
# saved tensors. Without custom_fwd/custom_bwd the backward mixes bf16 and fp32 and fails.

CUSTOM = "custom_autograd_function"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_custom_function_rewrite_trains_like_fp32(dtype: str) -> None:
    fp32 = _fp32(CUSTOM)
    if dtype == "float16":
        amp = _amp(CUSTOM, env=FP16)
        _assert_fp16_training(amp)
        fp32 = _twin(CUSTOM, (), amp)
    else:
        amp = _amp(CUSTOM)
        _assert_bf16_training(amp)
    assert amp.autocast_forwards > 0
    assert len(amp.losses) == len(fp32.losses) == 60
    assert fp32.losses[-1] < 0.5 * fp32.losses[0]  # the baseline learns
    # single-batch losses are noisy: compare the mean of the last 8 steps
    assert _mean_tail(amp.losses) == pytest.approx(_mean_tail(fp32.losses), rel=0.05)


# 6. lr_scheduler_per_step ---------------------------------------------------------------
# OneCycleLR stepped right after optimizer.step() every iteration (2 epochs x 16 = 32).
# MSELoss(reduction="sum") makes the first float16 steps overflow at scale 65536.

SCHED = "lr_scheduler_per_step"
STEPS_LINE = r"scheduler steps (\d+) optimizer steps (\d+)"


@pytest.fixture(scope="module")
def sched_fp32() -> ScriptRun:
    return _fp32(SCHED)


def test_scheduler_follows_the_optimizer_steps_really_taken(sched_fp32) -> None:
    fp32 = sched_fp32
    (sched32, opt32), = re.findall(STEPS_LINE, fp32.stdout)
    assert int(sched32) == int(opt32) == 32

    amp = _amp(SCHED, env=FP16)
    _assert_fp16_training(amp)
    (sched, opt), = re.findall(STEPS_LINE, amp.stdout)
    # steps were really skipped (the check is meaningful) ...
    assert int(opt) < int(opt32)
    # ... and the schedule advanced once per step Adam really took, not once per iteration
    assert int(sched) == int(opt)
    assert "lr_scheduler.step()" not in amp.stderr, amp.stderr[-2000:]
    assert len(amp.losses) == len(fp32.losses) == 32


def test_scheduler_rewrite_trains_in_bf16_like_fp32(sched_fp32) -> None:
    fp32 = sched_fp32
    amp = _amp(SCHED)
    _assert_bf16_training(amp)
    (sched, opt), = re.findall(STEPS_LINE, amp.stdout)
    assert int(sched) == int(opt) == 32  # bfloat16 needs no scaling: nothing is skipped
    epochs32 = _floats(r"epoch \d+ loss ([0-9.]+)", fp32.stdout)
    epochs = _floats(r"epoch \d+ loss ([0-9.]+)", amp.stdout)
    assert epochs32[-1] < 0.5 * epochs32[0]
    assert epochs[-1] == pytest.approx(epochs32[-1], rel=0.05)


# 7. ddp_gloo_spawn ----------------------------------------------------------------------
# mp.spawn(main_worker, nprocs=2), gloo over TCP on localhost, DDP + DistributedSampler.
# The harness observes its own process only; the workers' forwards are recorded by
# tests/_multiproc/sitecustomize.py (on PYTHONPATH, inherited by the spawned children).

DDP = "ddp_gloo_spawn"
RANK_LOSS = r"rank (\d) final loss ([0-9.]+)"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ddp_run(
    script: Path, log: Path, dtype_env: dict[str, str] | None = None
) -> tuple[ScriptRun, dict[str, float], Counter]:
    env = {**ONE_THREAD, "PYTHONPATH": str(MULTIPROC_DIR), "AMPREWRITE_FORWARD_LOG": str(log),
           **(dtype_env or {})}
    for _attempt in range(4):  # seen twice in a row on a clean CI run
        log.unlink(missing_ok=True)
        run = run_script(script, ("--port", str(_free_port())), env=env, timeout=60)
        if run.ok or not _gloo_teardown_abort(run):
            break
    assert run.ok, run.explain()
    losses = {rank: float(loss) for rank, loss in re.findall(RANK_LOSS, run.stdout)}
    forwards: Counter = Counter()
    pids: dict[str, set[str]] = {}
    for line in log.read_text().splitlines():
        pid, rank, dtype, grad, _autocast = line.split()
        if grad == "1":
            forwards[(rank, dtype)] += 1
            pids.setdefault(rank, set()).add(pid)
    assert set(pids) == {"0", "1"} and all(len(p) == 1 for p in pids.values()), pids
    assert len(pids["0"] | pids["1"]) == 2  # two worker processes, one per rank
    return run, losses, forwards


def _gloo_teardown_abort(run: ScriptRun) -> bool:
    """A worker aborted at exit, after both ranks finished training: gloo's background thread
    still joinable when the process ends (rare, torch's teardown, not the training). Such a
    run is tried again, up to four runs in all."""
    return ("terminate called without an active exception" in run.stderr
            and len(re.findall(RANK_LOSS, run.stdout)) == 2)


@pytest.fixture(scope="module")
def ddp_fp32(tmp_path_factory: pytest.TempPathFactory) -> tuple[ScriptRun, dict, Counter]:
    return _ddp_run(FIXTURES_DIR / DDP / "input.py", tmp_path_factory.mktemp("ddp") / "fp32.log")


# float16: the first steps overflow and are skipped (the workers' runs have no FP32 twin: the
# harness does not observe them), so its final losses trail FP32's a little more
@pytest.mark.parametrize(("dtype", "rtol"), [(BFLOAT16, 0.03), (FLOAT16, 0.1)])
def test_ddp_workers_train_in_low_precision_like_fp32(
    ddp_fp32, tmp_path: Path, dtype: str, rtol: float
) -> None:
    fp32, losses32, forwards32 = ddp_fp32
    env = FLOAT16_ENV if dtype == FLOAT16 else {}
    amp, losses, forwards = _ddp_run(FIXTURES_DIR / DDP / "expected_O1.py",
                                     tmp_path / "amp.log", env)
    # 3 epochs x 8 batches x 2 Linear layers per rank, all forwards in the workers
    assert forwards32 == {("0", FLOAT32): 48, ("1", FLOAT32): 48}
    assert forwards == {("0", dtype): 48, ("1", dtype): 48}
    assert not fp32.train_dtypes and not amp.train_dtypes  # the parent process trains nothing
    assert set(losses) == set(losses32) == {"0", "1"}
    for rank in ("0", "1"):
        assert math.isfinite(losses[rank])
        assert losses[rank] == pytest.approx(losses32[rank], rel=rtol), rank


# 8. an overflow in float16 ----------------------------------------------------------------
# Each rewrite above, in float16 with an inf injected into one gradient midway: the scaler
# must skip exactly that step wherever the script unscales (before clipping, after the last
# micro-batch, after the second optimizer's backward), every path must reach update(), and
# the run trains on like its FP32 twin. The per-step scheduler must skip with the step.

OVERFLOW_CASES = [
    pytest.param(CLIP, ("--clip", "1.0"), id="clip"),
    pytest.param(CLIP, ("--clip", "0"), id="grad-norm-log"),
    pytest.param(ACCUM, (), id="accumulation"),
    pytest.param(MULTI, (), id="two-optimizers"),
    pytest.param(CKPT, ("--epochs", "2"), id="checkpoint"),
    pytest.param(CUSTOM, (), id="custom-function"),
    pytest.param(SCHED, (), id="scheduler"),
]


@pytest.mark.parametrize(("case", "args"), OVERFLOW_CASES)
def test_rewrite_survives_an_overflow_in_float16(
    case: str, args: tuple[str, ...], tmp_path: Path
) -> None:
    if case == CKPT:
        args = (*args, "--checkpoint", str(tmp_path / "ckpt.pt"))
    script = FIXTURES_DIR / case / "expected_O1.py"
    baseline = Job.of(script, args, FLOAT16_ENV).run()
    assert baseline.ok, baseline.explain()
    at = overflow_step(baseline)
    run = Job.of(script, args, FLOAT16_ENV, overflow_at=at).run()
    assert_survives_overflow(baseline, run, at)
    _assert_fp16_training(run)
    if case == SCHED:  # the guard: one scheduler step per optimizer step really taken
        assert run.scheduler_steps == baseline.scheduler_steps - 1 == run.optimizer_steps_taken
        (sched, opt), = re.findall(STEPS_LINE, run.stdout)
        assert int(sched) == int(opt) == run.optimizer_steps_taken
        return  # its FP32 twin would still step the schedule at the skipped steps
    twin = _twin(case, args, run)
    assert twin.optimizer_steps_taken == run.optimizer_steps_taken
    assert _mean_tail(run.losses) == pytest.approx(_mean_tail(twin.losses), rel=0.03)
