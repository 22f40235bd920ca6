"""The execution half of benchmarks/gpu.py: the rewritten fixtures of tests/test_execute.py
(its `RUNNABLE` cases) run on a device in bfloat16 and in float16 (dynamic loss scaling) and
are compared with their FP32 input, as that test does on the CPU.

With AMPREWRITE_TEST_DEVICE=cuda, tests/execution.py keeps the GPU visible and the bootstrap
creates on it every tensor and module a script makes without naming a device (a fixture
that names the CPU stays there: the table's `on` column says where its Linear/Conv layers
ran). A float16 run is compared with its FP32 twin, the FP32 run that skips the steps the
float16 run's scaler skipped. Each case and dtype gets a status:

    ok      ran, trained in the dtype, final loss within the case's tolerance of FP32's
    drift   ran, but the final loss is outside the tolerance (or not finite)
    nocast  ran, but no Linear/Conv forward produced the dtype (expected of an `O1_plain`
            case in bfloat16 on CUDA: a --plain rewrite takes torch.amp's CUDA default,
            float16, which AMPREWRITE_DTYPE does not reach)
    crash   the rewrite failed (its traceback's last line is kept)
    fp32    the FP32 input itself failed on this device: nothing to compare with (a fixture
            that calls .numpy() on a tensor the default device put on the GPU does)
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.execution import (  # noqa: E402  (the repository must be importable first)
    BFLOAT16,
    FLOAT16,
    FLOAT32,
    ScriptRun,
    fp32_twin,
    run_scripts,
)
from tests.test_execute import RUNNABLE, Runnable  # noqa: E402


@dataclass(frozen=True)
class Check:
    """One case in one dtype, compared with FP32."""

    case: str
    dtype: str
    status: str
    final_fp32: float
    final_amp: float
    rtol: float
    on: str  # device types the Linear/Conv forwards ran on, e.g. "cuda"
    detail: str = ""
    losses_fp32: tuple[float, ...] = ()  # every loss of both runs, where not ok (gpu.json)
    losses_amp: tuple[float, ...] = ()

    @property
    def relative(self) -> float:
        if not (math.isfinite(self.final_fp32) and math.isfinite(self.final_amp)):
            return math.inf
        return abs(self.final_amp - self.final_fp32) / max(abs(self.final_fp32), 1e-12)


def _last_line(run: ScriptRun) -> str:
    lines = (run.error or run.stderr or f"exit {run.returncode}").strip().splitlines()
    return lines[-1][:200] if lines else f"exit {run.returncode}"


def _final(run: ScriptRun) -> float:
    return run.losses[-1] if run.ok and run.losses else math.nan


def _judge(case: Runnable, dtype: str, fp32: ScriptRun, amp: ScriptRun) -> Check:
    rtol = case.fp16_rtol if dtype == FLOAT16 else case.rtol
    on = ",".join(sorted(amp.record.get("forward_devices", {}))) or "-"
    common = {"case": str(case), "dtype": dtype.removeprefix("torch."), "rtol": rtol, "on": on,
              "final_fp32": _final(fp32), "final_amp": _final(amp)}
    if not fp32.ok:
        return Check(status="fp32", detail=_last_line(fp32), **common)
    if not amp.ok:
        return Check(status="crash", detail=_last_line(amp), **common)
    losses = {"losses_fp32": tuple(fp32.losses), "losses_amp": tuple(amp.losses)}
    if dtype not in amp.train_dtypes:
        seen = ", ".join(sorted(set(amp.train_dtypes))) or "no forward"
        return Check(status="nocast", detail=f"trained in {seen}", **losses, **common)
    finite = all(math.isfinite(loss) for loss in amp.losses) and amp.losses
    close = math.isclose(_final(amp), _final(fp32), rel_tol=rtol, abs_tol=1e-3)
    if not (finite and close and len(amp.losses) == len(fp32.losses)):
        return Check(status="drift", **losses, **common)
    return Check(status="ok", **common)


def check_cases(cases: list[Runnable], device: str) -> list[Check]:
    """Every case in bfloat16 and float16 on `device` ("cuda", or "cpu" for the smoke run)."""
    os.environ["AMPREWRITE_TEST_DEVICE"] = device
    jobs = [case.jobs() for case in cases]
    runs = run_scripts([job for case_jobs in jobs for job in case_jobs.values()])
    by_case = [dict(zip(case_jobs, runs[3 * i:3 * i + 3], strict=True))
               for i, case_jobs in enumerate(jobs)]
    twins = run_scripts([fp32_twin(case_jobs[FLOAT32], case_runs[FLOAT16])
                         for case_jobs, case_runs in zip(jobs, by_case, strict=True)])
    checks = []
    for case, case_runs, twin in zip(cases, by_case, twins, strict=True):
        checks.append(_judge(case, BFLOAT16, case_runs[FLOAT32], case_runs[BFLOAT16]))
        fp32 = twin if case_runs[FLOAT16].ok else case_runs[FLOAT32]
        checks.append(_judge(case, FLOAT16, fp32, case_runs[FLOAT16]))
    return checks


def selected(smoke: bool, names: list[str] | None = None) -> list[Runnable]:
    """test_execute's cases: those `names` gives (a fixture, or a fixture and its style as
    `str(case)` writes it), else all; the smoke run takes the first two."""
    cases = [case for case in RUNNABLE
             if names is None or case.name in names or str(case) in names]
    if names is not None and not cases:
        raise SystemExit(f"no fixture case named {' or '.join(names)}")
    return cases[:2] if smoke else cases
