"""Rewritten multi-file projects run on the CPU in bfloat16 and in float16 and train like
FP32, and resume from checkpoints written before and after the rewrite.

Each project runs as its users run it (`python main.py ...` from the project directory, the
sibling modules imported from there): the FP32 input tree, and the expected tree in each
low-precision dtype. A float16 run is compared with the FP32 run that skips the same steps.
Then both trees resume: the rewrite from an FP32 checkpoint (no scaler state in it: it must
load), and from its own checkpoint, whose scaler state must come back.
"""

from __future__ import annotations

import functools
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from tests.execution import (
    BFLOAT16,
    DTYPE_ENVS,
    FIXTURES_DIR,
    FLOAT16,
    FLOAT16_ENV,
    FLOAT32,
    Job,
    ScriptRun,
    fp32_twin,
    run_scripts,
)

PROJECTS = FIXTURES_DIR / "projects"


@dataclass(frozen=True)
class Project:
    name: str
    script: str
    save: tuple[str, ...]  # arguments that write a checkpoint to {ckpt}
    resume: tuple[str, ...]  # arguments that resume from {ckpt} for one more epoch
    checkpoint: str  # the file the saving run writes, under the checkpoint directory
    style: str = "O1"  # which expected tree runs: expected_<style>/

    def __str__(self) -> str:
        return f"{self.name}-{self.style}"

    @property
    def rewrite(self) -> str:
        return f"expected_{self.style}"

    def path(self, tree: str) -> Path:
        return PROJECTS / self.name / tree / self.script


PROJECT_RUNS = [
    Project("engine_function", "main.py", ("--output_dir", "{dir}"),
            ("--resume", "{file}", "--epochs", "4"), "checkpoint.pth"),
    Project("helper_module_checkpoints", "main_ce.py", ("--save_folder", "{dir}"),
            ("--resume", "{file}", "--epochs", "4"), "last.pth"),
    Project("trainer_receives_optimizer", "train.py", ("--checkpoint", "{file}"),
            ("--resume", "{file}", "--epochs", "4"), "ckpt.pt"),
    Project("package_chain", "train.py", ("--checkpoint", "{file}"),
            ("--resume", "{file}", "--epochs", "4"), "ckpt.pt"),
    Project("base_class_checkpoints", "train.py", ("--checkpoint", "{file}"),
            ("--resume", "{file}", "--epochs", "4"), "ckpt.pt"),
    Project("base_class_checkpoints", "train.py", ("--checkpoint", "{file}"),
            ("--resume", "{file}", "--epochs", "4"), "ckpt.pt", style="O2"),
    Project("package_chain", "train.py", ("--checkpoint", "{file}"),
            ("--resume", "{file}", "--epochs", "4"), "ckpt.pt", style="O1_plain"),
    Project("trainer_receives_optimizer", "train.py", ("--checkpoint", "{file}"),
            ("--resume", "{file}", "--epochs", "4"), "ckpt.pt", style="O2"),
    Project("engine_through_package_path", "main.py", ("--checkpoint", "{file}"),
            ("--resume", "{file}", "--epochs", "4"), "ckpt.pt"),
    Project("model_module_mask_fill", "train.py", ("--checkpoint", "{file}"),
            ("--resume", "{file}", "--epochs", "4"), "ckpt.pt"),
    Project("registry_base_trainer", "train.py", ("--checkpoint", "{file}"),
            ("--resume", "{file}", "--epochs", "4"), "ckpt.pt"),
    Project("flows_inverse_named_backward", "train.py", ("--checkpoint", "{file}"),
            ("--resume", "{file}", "--epochs", "4"), "ckpt.pt"),
]
LOW_PRECISION = [BFLOAT16, FLOAT16]


def _args(words: tuple[str, ...], directory: Path, project: Project) -> tuple[str, ...]:
    file = directory / project.checkpoint
    return tuple(w.format(dir=directory, file=file) for w in words)


_CHECKPOINTS = tempfile.TemporaryDirectory(prefix="amprewrite-projects-")  # for the session


def _checkpoints(project: Project, label: str) -> Path:
    directory = Path(_CHECKPOINTS.name) / str(project) / label
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@functools.cache
def _saving_runs(project: Project) -> dict[str, tuple[ScriptRun, Path]]:
    """FP32 input and the rewrite in each dtype, each saving its checkpoint."""
    jobs, places = {}, {}
    for dtype in (FLOAT32, *LOW_PRECISION):
        place = _checkpoints(project, f"save-{dtype}")
        tree = "input" if dtype == FLOAT32 else project.rewrite
        jobs[dtype] = Job.of(project.path(tree), _args(project.save, place, project),
                             DTYPE_ENVS.get(dtype))
        places[dtype] = place
    runs = dict(zip(jobs, run_scripts(list(jobs.values())), strict=True))
    for run in runs.values():
        assert run.ok, run.explain()
    return {dtype: (runs[dtype], places[dtype] / project.checkpoint) for dtype in runs}


def _assert_trains_like(amp: ScriptRun, fp32: ScriptRun, rtol: float) -> None:
    assert len(amp.losses) == len(fp32.losses) > 0
    assert all(math.isfinite(loss) for loss in amp.losses)
    assert amp.losses[-1] == pytest.approx(fp32.losses[-1], rel=rtol, abs=1e-3)


@pytest.mark.parametrize("dtype", LOW_PRECISION)
@pytest.mark.parametrize("project", PROJECT_RUNS, ids=str)
def test_rewritten_project_trains_in_low_precision_like_fp32(project: Project, dtype: str) -> None:
    runs = _saving_runs(project)
    fp32, (amp, _) = runs[FLOAT32][0], runs[dtype]
    assert set(fp32.train_dtypes) == {FLOAT32}
    assert dtype in amp.train_dtypes, "the training forward did not run under autocast"
    assert amp.optimizer_steps == fp32.optimizer_steps
    if dtype == FLOAT16:
        assert all(amp.backward_scaled), "a loss did not go through the threaded scaler"
        twin = fp32_twin(Job.of(project.path("input"), _args(
            project.save, _checkpoints(project, "twin"), project)), amp).run()
        assert twin.ok, twin.explain()
        fp32 = twin
    _assert_trains_like(amp, fp32, 0.02 if dtype == FLOAT16 else 0.05)


@pytest.mark.parametrize("dtype", LOW_PRECISION)
@pytest.mark.parametrize("project", [p for p in PROJECT_RUNS if p.style == "O1"], ids=str)
def test_rewritten_project_resumes_from_an_fp32_checkpoint(project: Project, dtype: str) -> None:
    _, checkpoint = _saving_runs(project)[FLOAT32]
    assert "scaler" not in torch.load(checkpoint, weights_only=False)
    resume = _args(project.resume, checkpoint.parent, project)
    fp32, amp = run_scripts([Job.of(project.path("input"), resume),
                             Job.of(project.path(project.rewrite), resume, DTYPE_ENVS[dtype])])
    assert amp.ok, amp.explain()
    assert fp32.ok, fp32.explain()
    assert dtype in amp.train_dtypes
    assert len(amp.losses) == len(fp32.losses) > 0
    assert all(math.isfinite(loss) for loss in amp.losses)


def _tracker(state: dict) -> int:
    """Steps since the scale last changed (the runtime's key, or torch's with `--plain`)."""
    return state["growth_tracker"] if "growth_tracker" in state else state["_growth_tracker"]


@pytest.mark.parametrize("project", PROJECT_RUNS, ids=str)
def test_rewritten_project_resumes_its_own_scaler_state(project: Project) -> None:
    saved, checkpoint = _saving_runs(project)[FLOAT16]
    state = torch.load(checkpoint, weights_only=False)["scaler"]
    assert state["scale"] == saved.scales[-1], "the checkpoint holds the scaler's last scale"
    assert _tracker(state) > 0
    again = _checkpoints(project, "resumed")
    arguments = (*_args(project.resume, checkpoint.parent, project),
                 *_args(project.save, again, project))
    [resumed] = run_scripts([Job.of(project.path(project.rewrite), arguments, FLOAT16_ENV)])
    assert resumed.ok, resumed.explain()
    assert resumed.optimizer_steps > 0 and not resumed.skipped_at
    after = torch.load(again / project.checkpoint, weights_only=False)["scaler"]
    # A restored scaler counts on from the saved state; a fresh one would count from 0.
    assert _tracker(after) == _tracker(state) + resumed.optimizer_steps
