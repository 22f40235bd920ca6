"""Run a (possibly rewritten) training script in a CPU subprocess and observe it.

    from tests.execution import run_script
    run = run_script(FIXTURES / "toplevel_loop" / "input.py")
    assert run.ok, run.explain()
    assert run.losses and set(run.train_dtypes) == {"torch.float32"}

The subprocess is `python tests/_bootstrap.py OUT.json SCRIPT ARGS...` (see that module for
what is observed and how), forked from `tests/_forkserver.py`, which imports torch once for the
whole session (a run whose environment changes how Python starts, a `PYTHON*` variable, is a
fresh interpreter instead; `AMPREWRITE_TEST_FORKSERVER=0` makes every run one). It runs on
the CPU only (`CUDA_VISIBLE_DEVICES` is emptied), with `<repo>/runtime` (so
`amprewrite_runtime`) and `<repo>` on `PYTHONPATH`, from the script's directory as working
directory.

`AMPREWRITE_TEST_DEVICE=cuda` (in the environment of the caller or of a run) is the one
exception, for a machine with a GPU (benchmarks/gpu.py): `CUDA_VISIBLE_DEVICES` is left as it
is, every run is a fresh interpreter (no fork server: CUDA and a fork of a process that
imported torch do not mix), and the bootstrap makes that device the default one for tensors
and modules created without a device (see `tests/_bootstrap.py`). Unset, or `cpu`, nothing
changes.

The dtype a rewritten script runs in is the runtime's choice: bfloat16 on this CPU, float16
with dynamic loss scaling (the CUDA path) under `env=FLOAT16_ENV`. Tests that execute a
rewrite run it in both (see `DTYPE_ENVS`), and once more in float16 with an injected overflow:

    run = run_script(script, env=FLOAT16_ENV, overflow_at=12)
    assert run.overflow_injected_at == 12 and 12 in run.skipped_at

`overflow_at=N` puts an inf into one gradient of the optimizer about to take the N-th
optimizer step attempt (1-based, counted across all optimizers in call order), before the
grad scaler checks it: an enabled scaler must skip exactly that step and back off its scale,
and the script must carry on (skip branches, `update()` on every path, scheduler guards).
Without an enabled scaler (FP32, bfloat16) the inf reaches the weights, so inject float16
runs only. `tests/_bootstrap.py` says exactly what counts as an attempt.

A float16 run skips the steps whose gradients overflowed (the first few, at the initial scale
65536, and the injected one), so it is compared with its FP32 twin: the FP32 script run with
`skip_at=fp16_run.skipped_at`, whose optimizer steps at those attempts change nothing
(`fp32_twin`). Both then take the same steps, and the losses agree to float16's precision.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
RUNTIME_DIR = REPO_ROOT / "runtime"
FIXTURES_DIR = REPO_ROOT / "fixtures"
BOOTSTRAP = TESTS_DIR / "_bootstrap.py"
FORKSERVER = TESTS_DIR / "_forkserver.py"
OVERFLOW_ENV = "AMPREWRITE_TEST_OVERFLOW_AT"  # read (and hidden from the script) by the bootstrap
SKIP_ENV = "AMPREWRITE_TEST_SKIP_AT"  # likewise
DEVICE_ENV = "AMPREWRITE_TEST_DEVICE"  # cuda: run on the GPU (see the module docstring)

FLOAT32 = "torch.float32"
BFLOAT16 = "torch.bfloat16"
FLOAT16 = "torch.float16"

# AMPREWRITE_DTYPE for each low-precision run of a rewritten script: the CPU's default
# (bfloat16, no loss scaling) and the CUDA path (float16, dynamic loss scaling on).
BFLOAT16_ENV: dict[str, str] = {"AMPREWRITE_DTYPE": "bfloat16"}
# (`--plain` rewrites use torch.amp with the device's defaults: the CUDA ones, see
# tests/_bootstrap.py, make them run in float16 with an enabled scaler too)
FLOAT16_ENV: dict[str, str] = {"AMPREWRITE_DTYPE": "float16",
                               "AMPREWRITE_TEST_CUDA_DEFAULTS": "1"}
DTYPE_ENVS: dict[str, dict[str, str]] = {BFLOAT16: BFLOAT16_ENV, FLOAT16: FLOAT16_ENV}
# One intra-op thread: the fixtures' models are tiny, and on a 2-core machine two threads
# only contend (a run takes 3-4x longer); runs go side by side instead (`run_scripts`).
ONE_THREAD: dict[str, str] = {"AMPREWRITE_TEST_THREADS": "1", "OMP_NUM_THREADS": "1"}


@dataclass
class ScriptRun:
    """What one run of a script did. Dtypes are strings such as "torch.bfloat16"."""

    returncode: int
    stdout: str
    stderr: str
    # Value of every scalar tensor `.backward()` was called on, in call order, as float;
    # a loss scaled by an enabled torch GradScaler is recorded unscaled.
    losses: list[float] = field(default_factory=list)
    backward_dtypes: list[str] = field(default_factory=list)  # parallel to `losses`
    backward_scaled: list[bool] = field(default_factory=list)  # parallel to `losses`
    backward_count: int = 0  # every backward call, scalar or not
    # Output dtype of every nn.Linear / nn.Conv* forward (capped at 5000 entries each) ...
    linear_dtypes: list[str] = field(default_factory=list)
    train_dtypes: list[str] = field(default_factory=list)  # ... run with grad enabled
    eval_dtypes: list[str] = field(default_factory=list)  # ... under no_grad/inference_mode
    # [module class name, output dtype, grad enabled, autocast enabled] per forward (capped)
    forwards: list[list] = field(default_factory=list)
    # {"train": {dtype: count}, "eval": {dtype: count}}, not capped
    dtype_counts: dict[str, dict[str, int]] = field(default_factory=dict)
    error: str | None = None  # the script's traceback when it raised
    error_type: str | None = None
    timed_out: bool = False
    duration_s: float | None = None  # time spent in the script itself (after torch import)
    # Optimizer step attempts (1-based, all optimizers, see tests/_bootstrap.py): how many,
    # how many really stepped, and which did not (inf/NaN found by the scaler, or abandoned).
    optimizer_steps: int = 0
    optimizer_steps_taken: int = 0
    skipped_at: list[int] = field(default_factory=list)
    scales: list[float] = field(default_factory=list)  # after each enabled scaler update()
    scheduler_steps: int = 0  # LRScheduler.step() calls after construction
    overflow_at: int | None = None  # as asked
    overflow_injected_at: int | None = None  # the attempt whose gradient got the inf
    record: dict = field(default_factory=dict, repr=False)  # the raw JSON record

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.error is None

    @property
    def grad_mode_dtypes(self) -> dict[str, list[str]]:
        """Forward output dtypes split by grad mode: {"train": [...], "eval": [...]}."""
        return {"train": self.train_dtypes, "eval": self.eval_dtypes}

    @property
    def autocast_forwards(self) -> int:
        """How many Linear/Conv forwards ran with autocast enabled (of those recorded)."""
        return sum(1 for f in self.forwards if f[3])

    def explain(self) -> str:
        """A failure message for asserts: status, traceback and the output tails."""
        parts = [f"returncode={self.returncode} timed_out={self.timed_out}"]
        if self.error:
            parts.append(self.error)
        parts.append("--- stdout (tail) ---\n" + self.stdout[-3000:])
        parts.append("--- stderr (tail) ---\n" + self.stderr[-3000:])
        return "\n".join(parts)


def subprocess_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a script runs with: CPU only (unless AMPREWRITE_TEST_DEVICE asks for
    another device), runtime importable, `env` on top."""
    out = dict(os.environ)
    if run_device(env) == "cpu":
        out["CUDA_VISIBLE_DEVICES"] = ""
    out["PYTHONHASHSEED"] = "0"
    out["PYTHONUNBUFFERED"] = "1"
    out.setdefault("OMP_NUM_THREADS", "2")
    if env:
        out.update(env)
    extra = [str(RUNTIME_DIR), str(REPO_ROOT)]
    if out.get("PYTHONPATH"):
        extra.append(out["PYTHONPATH"])
    out["PYTHONPATH"] = os.pathsep.join(extra)
    return out


def run_device(env: Mapping[str, str] | None = None) -> str:
    """The device runs are meant for: AMPREWRITE_TEST_DEVICE of `env`, else of this process,
    else "cpu"."""
    return (env or {}).get(DEVICE_ENV) or os.environ.get(DEVICE_ENV) or "cpu"


# Seconds a quiet 2-core machine takes for `_reference_workload` (measured: 0.053-0.056 s).
REFERENCE_WORKLOAD_SECONDS = 0.055
MOST_SLOWNESS = 10.0  # a timeout still ends a run that hangs


def _reference_workload() -> float:
    """Seconds this machine takes now for a fixed small CPU workload."""
    start = time.perf_counter()
    sum(i * i for i in range(1_000_000))
    return time.perf_counter() - start


@functools.cache
def machine_slowness() -> float:
    """How many times slower than a quiet 2-core machine this one runs now (measured once per
    session, the median of three runs; between 1 and MOST_SLOWNESS): execution timeouts are
    multiplied by it, so that a loaded machine waits longer instead of failing at random."""
    median = sorted(_reference_workload() for _ in range(3))[1]
    return min(max(median / REFERENCE_WORKLOAD_SECONDS, 1.0), MOST_SLOWNESS)


def run_script(
    path: Path | str,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
    cwd: Path | str | None = None,
    overflow_at: int | None = None,
    skip_at: Sequence[int] = (),
) -> ScriptRun:
    """Run `path` with `args` under the bootstrap on the CPU and return what it did.

    `overflow_at=N` injects an inf into a gradient before the N-th optimizer step attempt
    (1-based; see the module docstring): meant for float16 runs, which must skip that step.
    `skip_at` makes the direct optimizer steps of those attempts no-ops (an FP32 twin).
    Never raises for a failing script: check `run.ok` / `run.returncode` (`run.explain()`
    makes a good assert message). A run past `timeout` seconds (on a quiet 2-core machine:
    scaled by `machine_slowness()`) is killed and comes back with `timed_out=True` and
    returncode -9.
    """
    timeout *= machine_slowness()
    script = Path(path).resolve()
    workdir = Path(cwd) if cwd is not None else script.parent
    with tempfile.TemporaryDirectory(prefix="amprewrite-run-") as tmp:
        out_json = Path(tmp) / "record.json"
        full_env = subprocess_env(env)
        if overflow_at is not None:
            if overflow_at < 1:
                raise ValueError(f"overflow_at={overflow_at}: attempts are numbered from 1")
            full_env[OVERFLOW_ENV] = str(overflow_at)
        if skip_at:
            full_env[SKIP_ENV] = ",".join(map(str, skip_at))
        argv = [str(out_json), str(script), *map(str, args)]
        server = _fork_server(full_env)
        if server is not None:
            proc = server.run(argv, workdir, full_env, timeout, Path(tmp))
        else:
            proc = _subprocess_run([sys.executable, str(BOOTSTRAP), *argv], workdir, full_env,
                                   timeout)
        if proc.returncode == -9 and proc.timed_out:
            return ScriptRun(returncode=-9, stdout=proc.stdout,
                             stderr=proc.stderr + f"\n[execution] timed out after {timeout}s",
                             timed_out=True)
        record: dict = {}
        if out_json.exists():
            record = json.loads(out_json.read_text(encoding="utf-8"))
    run = ScriptRun(returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr)
    if not record:
        run.error = run.error or "[execution] no record written (bootstrap died early)"
        return run
    run.record = record
    run.losses = list(record.get("losses", []))
    run.backward_dtypes = list(record.get("backward_dtypes", []))
    run.backward_scaled = list(record.get("backward_scaled", []))
    run.backward_count = int(record.get("backward_count", 0))
    run.linear_dtypes = list(record.get("linear_dtypes", []))
    run.train_dtypes = list(record.get("train_dtypes", []))
    run.eval_dtypes = list(record.get("eval_dtypes", []))
    run.forwards = list(record.get("forwards", []))
    run.dtype_counts = dict(record.get("dtype_counts", {}))
    run.error = record.get("error")
    run.error_type = record.get("error_type")
    run.duration_s = record.get("duration_s")
    run.optimizer_steps = int(record.get("optimizer_steps", 0))
    run.optimizer_steps_taken = int(record.get("optimizer_steps_taken", 0))
    run.skipped_at = list(record.get("skipped_at", []))
    run.scales = list(record.get("scales", []))
    run.scheduler_steps = int(record.get("scheduler_steps", 0))
    run.overflow_at = record.get("overflow_at")
    run.overflow_injected_at = record.get("overflow_injected_at")
    return run


@dataclass
class _Finished:
    """How a run ended: its status and output."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False


def _subprocess_run(cmd: list[str], cwd: Path, env: dict[str, str],
                    timeout: float) -> _Finished:
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        return _Finished(-9, _text(exc.stdout), _text(exc.stderr), timed_out=True)
    return _Finished(proc.returncode, proc.stdout, proc.stderr)


class _ForkServer:
    """The session's `_forkserver.py` process: one request per run, replies read by a thread."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.process = subprocess.Popen([sys.executable, str(FORKSERVER)], cwd=TESTS_DIR,
                                        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True)
        self.lock = threading.Lock()
        self.ids = itertools.count(1)
        self.waiting: dict[int, queue.Queue[int | None]] = {}
        threading.Thread(target=self._read_replies, daemon=True).start()

    def serves(self, env: Mapping[str, str]) -> bool:
        """Only environments that start Python the same way (no other `PYTHON*` value)."""
        keys = {k for k in (*env, *self.env) if k.startswith("PYTHON")}
        return self.process.poll() is None and all(env.get(k) == self.env.get(k) for k in keys)

    def _read_replies(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            reply = json.loads(line)
            with self.lock:
                waiter = self.waiting.pop(reply["id"], None)
            if waiter is not None:
                waiter.put(reply["returncode"])
        with self.lock:  # the server is gone: nobody waits forever
            for waiter in self.waiting.values():
                waiter.put(None)
            self.waiting.clear()

    def _send(self, message: dict) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def run(self, argv: list[str], cwd: Path, env: dict[str, str], timeout: float,
            tmp: Path) -> _Finished:
        ident = next(self.ids)
        waiter: queue.Queue[int | None] = queue.Queue()
        out, err = tmp / "stdout.txt", tmp / "stderr.txt"
        with self.lock:
            self.waiting[ident] = waiter
            self._send({"id": ident, "cwd": str(cwd), "env": env, "argv": argv,
                        "stdout": str(out), "stderr": str(err)})
        timed_out = False
        try:
            code = waiter.get(timeout=timeout)
        except queue.Empty:
            timed_out = True
            with self.lock:
                self._send({"kill": ident})
            code = waiter.get()
        if code is None:
            raise RuntimeError("the fork server died; rerun with AMPREWRITE_TEST_FORKSERVER=0")
        return _Finished(-9 if timed_out else code, _read(out), _read(err), timed_out)


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


_SERVER: list[_ForkServer] = []
_SERVER_LOCK = threading.Lock()


def _fork_server(env: dict[str, str]) -> _ForkServer | None:
    """The session's fork server, started on first use, when it can run with `env`."""
    if os.environ.get("AMPREWRITE_TEST_FORKSERVER", "1") == "0" or run_device(env) != "cpu":
        return None
    with _SERVER_LOCK:
        if not _SERVER:
            _SERVER.append(_ForkServer(subprocess_env()))
    server = _SERVER[0]
    return server if server.serves(env) else None


@dataclass(frozen=True)
class Job:
    """One `run_script` call, hashable so that identical runs are made once per session."""

    path: Path
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    overflow_at: int | None = None
    skip_at: tuple[int, ...] = ()

    @classmethod
    def of(cls, path: Path | str, args: Sequence[str] = (), env: Mapping[str, str] | None = None,
           overflow_at: int | None = None, skip_at: Sequence[int] = ()) -> Job:
        merged = {**ONE_THREAD, **(env or {})}
        return cls(Path(path).resolve(), tuple(map(str, args)), tuple(sorted(merged.items())),
                   overflow_at, tuple(skip_at))

    def run(self) -> ScriptRun:
        return _cached_run(self)


@functools.cache
def _cached_run(job: Job) -> ScriptRun:
    return run_script(job.path, job.args, env=dict(job.env), overflow_at=job.overflow_at,
                      skip_at=job.skip_at)


def run_scripts(jobs: Sequence[Job]) -> list[ScriptRun]:
    """Run `jobs` side by side (one per CPU core, one thread each) and return their runs in
    order. Runs are cached for the session: a job already run is not run again."""
    workers = max(1, min(len(jobs), os.cpu_count() or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(Job.run, jobs))


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode("utf-8", "replace")


def fp32_twin(fp32: Job, fp16_run: ScriptRun) -> Job:
    """The FP32 run that skips the steps `fp16_run` skipped (see the module docstring)."""
    return Job(fp32.path, fp32.args, fp32.env, skip_at=tuple(fp16_run.skipped_at))


def overflow_step(baseline: ScriptRun) -> int:
    """Where to inject into a float16 run: midway through the steps after the last one its
    overflow-free `baseline` skipped by itself (the scale has settled there), so the
    injected skip is the only new one."""
    settled = max(baseline.skipped_at, default=0)
    remaining = baseline.optimizer_steps - settled
    assert remaining >= 2, f"no settled steps to inject into: {baseline.skipped_at}"
    return settled + (remaining + 1) // 2


def assert_survives_overflow(
    baseline: ScriptRun, run: ScriptRun, at: int, static_scale: bool = False
) -> None:
    """`run` is `baseline` (float16, enabled scaler) with `overflow_at=at`: the inf was
    injected there, that step and only that one more was skipped, the scale backed off
    once (a static scale, O3's, stays), and the script carried on with finite losses."""
    assert run.ok, run.explain()
    assert run.overflow_injected_at == at, f"nothing to inject into at step {at}"
    assert run.skipped_at == sorted([*baseline.skipped_at, at]), (
        f"skipped {run.skipped_at}, {baseline.skipped_at} without the overflow")
    assert run.optimizer_steps == baseline.optimizer_steps
    assert len(run.losses) == len(baseline.losses)
    assert all(math.isfinite(loss) for loss in run.losses), run.losses
    backed_off = baseline.scales[-1] if static_scale else baseline.scales[-1] / 2
    assert run.scales and run.scales[-1] == backed_off, (run.scales, baseline.scales)
