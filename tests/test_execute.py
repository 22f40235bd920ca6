"""Rewritten fixtures run on the CPU in bfloat16 and in float16, and they train like FP32.

Each case runs the FP32 input and its expected rewrite in subprocesses (see
`tests/execution.py`), the rewrite twice: in bfloat16 (the CPU's default) and with
`AMPREWRITE_DTYPE=float16`, the CUDA path, where the runtime turns dynamic loss scaling on.
The rewrite's Linear/Conv layers must have produced outputs in that dtype (so a rewrite that
does nothing fails), the input's must not, both must backpropagate the same number of losses,
and the final losses must agree within the tolerance stated per case and dtype. A third run
in float16 injects an overflow (an inf in one gradient, `overflow_at`): exactly that step is
skipped, the scale backs off, schedulers stepped per iteration skip with it, and the script
runs to the end.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

import pytest

from amprewrite.notebook_script import cells as notebook_cells
from tests.execution import (
    BFLOAT16,
    DTYPE_ENVS,
    FIXTURES_DIR,
    FLOAT16,
    FLOAT16_ENV,
    FLOAT32,
    ONE_THREAD,
    Job,
    ScriptRun,
    assert_survives_overflow,
    fp32_twin,
    overflow_step,
    run_script,
    run_scripts,
)

LOW_PRECISION = [BFLOAT16, FLOAT16]


@dataclass(frozen=True)
class Runnable:
    name: str
    style: str = "O1"
    args: tuple[str, ...] = ()
    rtol: float = 0.05  # bfloat16 keeps ~3 significant digits; a few steps drift a little
    # float16 keeps ~4 digits; compared with the FP32 run that skips the same steps
    fp16_rtol: float = 0.02
    eval_autocast: bool = False  # the script also evaluates under no_grad: check it too
    step_scheduler: bool = False  # an LR scheduler stepped per iteration, behind a guard

    def __str__(self) -> str:
        return "-".join([self.name, self.style, *(arg.lstrip("-") for arg in self.args)])

    @property
    def rewrite(self) -> Path:
        return FIXTURES_DIR / self.name / f"expected_{self.style}.py"

    def jobs(self) -> dict[str, Job]:
        """FP32 input, then the rewrite in each low-precision dtype."""
        fp32 = Job.of(FIXTURES_DIR / self.name / "input.py", self.args)
        return {FLOAT32: fp32, **{dtype: Job.of(self.rewrite, self.args, env)
                                  for dtype, env in DTYPE_ENVS.items()}}


RUNNABLE = [
    Runnable("toplevel_loop"),
    Runnable("toplevel_loop", style="O1_plain"),
    Runnable("mnist_functions", eval_autocast=True),
    Runnable("trainer_class", eval_autocast=True),
    Runnable("trainer_class", style="O1_plain", eval_autocast=True),
    Runnable("main_loop"),
    Runnable("transformer_lm", eval_autocast=True),
    Runnable("gan_dcgan", rtol=0.15, fp16_rtol=0.15),
    Runnable("scaler_name_taken"),
    Runnable("method_step_helper"),
    Runnable("loss_passed_to_step_helper"),
    Runnable("optimizer_bound_in_main_guard"),
    Runnable("rule_grad_clamp_loop"),
    Runnable("stateful_model_hidden"),
    Runnable("vae_loss_helper"),
    Runnable("rule_grad_clip_helper"),
    Runnable("model_tuple_int_output"),
    Runnable("optional_encoder_optimizer"),
    Runnable("rule_clip_norm_method"),
    Runnable("saliency_and_train"),
    Runnable("rule_opaque_clip_helpers"),
    Runnable("rule_learner_object_backward"),
    Runnable("rule_escape_samples_and_distances", rtol=0.1, fp16_rtol=0.1),
    Runnable("rule_seeded_backward_wgan", rtol=0.15, fp16_rtol=0.15),
    Runnable("rule_lazy_regularisation"),
    Runnable("rule_autograd_backward"),
    Runnable("rule_autograd_backward", style="O1_plain"),
    Runnable("rule_optimizer_under_same_test", rtol=0.1, fp16_rtol=0.05),
    Runnable("rule_optimizer_under_same_test", args=("--autotune", "0"), rtol=0.1,
             fp16_rtol=0.05),
    Runnable("rule_grad_read_in_if_test", rtol=0.1, fp16_rtol=0.05),
    Runnable("rule_parameter_not_a_model", eval_autocast=True, rtol=0.1, fp16_rtol=0.05),
    Runnable("rule_update_after_branch", rtol=0.1, fp16_rtol=0.05),
    Runnable("rule_update_after_branch", args=("--autotune", "0"), rtol=0.1, fp16_rtol=0.05),
    Runnable("rule_escape_sample_from_method", rtol=0.1, fp16_rtol=0.05),
    Runnable("rule_distribution_in_model_method", rtol=0.1, fp16_rtol=0.05),
    Runnable("rule_distribution_arguments_not_tensors", rtol=0.1, fp16_rtol=0.05),
    Runnable("rule_one_optimizer_two_models"),
    Runnable("rule_optimizers_built_when_training"),
    Runnable("rule_demo_backward_before_loop"),
    Runnable("rule_opaque_clip_optional_optimizer"),
    Runnable("rule_inplace_same_dtype_source"),
    Runnable("rule_index_put_low_target"),
    Runnable("rule_data_init_keeps_dtype"),
    Runnable("rule_data_init_in_derived_flow"),
    Runnable("rule_unscale_after_backward_helper"),
    Runnable("rule_unscale_in_backward_helper"),
    Runnable("rule_unscale_in_step_helper"),
    Runnable("rule_unscale_in_step_helper", style="O2", rtol=0.1, fp16_rtol=0.05),
    Runnable("rule_unscale_reads_then_step_helper"),
    Runnable("rule_loss_reduced_in_backward_helper"),
    Runnable("rule_penalty_inputs_not_cast", rtol=0.1, fp16_rtol=0.05),
]

# Cases whose float16 run is compared with FP32, without the overflow run the cases above
# also get (their scaler protocol is the common one: the CI's time goes where it tells).
TRAINED_ONLY = [
    Runnable("rule_seeded_critic_variants"),
    Runnable("rule_learner_callbacks"),
    Runnable("rule_optimizer_attribute_dicts"),
]


@functools.cache
def _runs(case: Runnable) -> dict[str, ScriptRun]:
    """The case's FP32, bfloat16 and float16 runs, made side by side (once per session)."""
    jobs = case.jobs()
    runs = dict(zip(jobs, run_scripts(list(jobs.values())), strict=True))
    for run in runs.values():
        assert run.ok, run.explain()
    return runs


@functools.cache
def _overflow_runs(case: Runnable) -> tuple[ScriptRun, int, ScriptRun]:
    """The float16 run with an overflow injected midway, where, and its FP32 twin."""
    at = overflow_step(_runs(case)[FLOAT16])
    run = Job.of(case.rewrite, case.args, FLOAT16_ENV, overflow_at=at).run()
    return run, at, fp32_twin(case.jobs()[FLOAT32], run).run()


def _assert_close(amp: ScriptRun, fp32: ScriptRun, rtol: float) -> None:
    assert len(amp.losses) == len(fp32.losses) > 0
    assert all(math.isfinite(loss) for loss in amp.losses)
    final_fp32, final_amp = fp32.losses[-1], amp.losses[-1]
    assert final_amp == pytest.approx(final_fp32, rel=rtol, abs=1e-3), (
        f"final loss {final_amp} vs FP32 {final_fp32}"
    )


@pytest.mark.parametrize("dtype", LOW_PRECISION)
@pytest.mark.parametrize("case", [*RUNNABLE, *TRAINED_ONLY], ids=str)
def test_rewrite_trains_in_low_precision_like_fp32(case: Runnable, dtype: str) -> None:
    runs = _runs(case)
    fp32, amp = runs[FLOAT32], runs[dtype]
    assert set(fp32.train_dtypes) == {FLOAT32}
    assert dtype in amp.train_dtypes, "the training forward did not run under autocast"
    assert amp.optimizer_steps == fp32.optimizer_steps  # every step went through
    if dtype == FLOAT16:
        assert any(amp.backward_scaled), "no loss went through an enabled GradScaler"
        # the first steps overflow at the initial scale: compare with FP32 skipping them
        fp32 = fp32_twin(case.jobs()[FLOAT32], amp).run()
        assert fp32.ok, fp32.explain()
        assert fp32.optimizer_steps_taken == amp.optimizer_steps_taken
    _assert_close(amp, fp32, case.fp16_rtol if dtype == FLOAT16 else case.rtol)
    if case.eval_autocast:
        assert dtype in amp.eval_dtypes, "the evaluation forward did not run under autocast"
        assert dtype not in fp32.eval_dtypes


@pytest.mark.parametrize("case", RUNNABLE, ids=str)
def test_rewrite_survives_an_overflow_in_float16(case: Runnable) -> None:
    run, at, fp32 = _overflow_runs(case)
    assert_survives_overflow(_runs(case)[FLOAT16], run, at)
    assert fp32.ok and fp32.optimizer_steps_taken == run.optimizer_steps_taken
    _assert_close(run, fp32, case.fp16_rtol)
    baseline = _runs(case)[FLOAT16]
    # a scheduler stepped per iteration skips with the step; one stepped per epoch does not
    assert run.scheduler_steps == baseline.scheduler_steps - case.step_scheduler


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_inference_only_script_autocasts_without_a_scaler(dtype: str) -> None:
    directory = FIXTURES_DIR / "inference_only"
    fp32, amp = run_scripts([Job.of(directory / "input.py"),
                             Job.of(directory / "expected_O1.py", env=DTYPE_ENVS[dtype])])
    assert fp32.ok and amp.ok, amp.explain()
    assert set(fp32.eval_dtypes) == {FLOAT32}
    assert dtype in amp.eval_dtypes
    assert "GradScaler" not in (directory / "expected_O1.py").read_text()


NOTEBOOKS_DIR = FIXTURES_DIR / "notebooks"


@pytest.fixture(scope="module")
def demo_cells_scripts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """demo_cells' input and rewrite, each notebook's code cells in order as one script (what a
    kernel runs top to bottom)."""
    directory, scripts = tmp_path_factory.mktemp("demo_cells"), []
    for name in ("input", "expected_O1"):
        script = directory / f"{name}.py"
        cells = notebook_cells(NOTEBOOKS_DIR / "demo_cells" / f"{name}.ipynb")
        script.write_text("\n\n".join(source for _, source in cells) + "\n")
        scripts.append(script)
    return scripts[0], scripts[1]


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_rewritten_notebook_cells_train_like_fp32(
    dtype: str, demo_cells_scripts: tuple[Path, Path]
) -> None:
    """demo_cells: gradient descent by hand and a gradient read before any optimizer stay FP32
    and unscaled; the optimizer stepped in two top-level cells trains in low precision."""
    fp32_job = Job.of(demo_cells_scripts[0])
    amp_job = Job.of(demo_cells_scripts[1], env=DTYPE_ENVS[dtype])
    fp32, amp = run_scripts([fp32_job, amp_job])
    assert fp32.ok and amp.ok, amp.explain()
    assert dtype in amp.train_dtypes
    assert amp.optimizer_steps == fp32.optimizer_steps
    demo = 31  # the hand-made loop's 30 backwards and `(a ** 2).backward()`
    if dtype == FLOAT16:
        assert amp.backward_scaled[:demo] == [False] * demo and all(amp.backward_scaled[demo:])
        fp32 = fp32_twin(fp32_job, amp).run()
    assert amp.losses[:demo] == pytest.approx(fp32.losses[:demo], rel=1e-6)
    _assert_close(amp, fp32, 0.02 if dtype == FLOAT16 else 0.05)


def test_opt_level_override_runs_the_rewrite_in_fp32() -> None:
    """AMPREWRITE_OPT_LEVEL=O0 turns a rewritten script back into plain FP32 at run time."""
    directory = FIXTURES_DIR / "toplevel_loop"
    fp32 = run_script(directory / "input.py")
    o0 = run_script(directory / "expected_O1.py", env={"AMPREWRITE_OPT_LEVEL": "O0"})
    assert o0.ok, o0.explain()
    assert set(o0.train_dtypes) == {FLOAT32}
    assert o0.losses == pytest.approx(fp32.losses, rel=1e-6)


CAST_MODEL_CASES = [
    ("toplevel_loop", "O2"),
    ("trainer_class", "O2"),
    ("transformer_lm", "O2"),
    ("mnist_functions", "O2"),
    ("rule_optimizer_tuple_assigned", "O2"),
    ("rule_one_optimizer_two_models", "O2"),
    ("toplevel_loop", "O3"),
    ("main_loop", "O3"),
]
O3_ADAM_IN_FLOAT16 = pytest.mark.xfail(
    strict=True, reason="O3 keeps no float32 master weights: in float16 AdamW's eps=1e-8 "
    "rounds to 0, the first step makes the weights non-finite and every later step is skipped "
    "(apex's O3 is a speed baseline; bfloat16 trains)")
CAST_MODEL_RUNS = [
    pytest.param(name, style, dtype, id=f"{name}-{style}-{dtype}",
                 marks=[O3_ADAM_IN_FLOAT16] if (name, dtype) == ("main_loop", FLOAT16) else [])
    for name, style in CAST_MODEL_CASES for dtype in LOW_PRECISION
]


@pytest.mark.parametrize(("name", "style", "dtype"), CAST_MODEL_RUNS)
def test_cast_model_levels_train_in_low_precision(name: str, style: str, dtype: str) -> None:
    """O2/O3 rewrites cast the model: the forward runs in low precision with no autocast at
    all, and training still brings the loss down like FP32 does (float16: like the FP32 run
    that skips the same steps). In float16 an injected overflow is skipped too (O2 unscales
    the float32 master gradients, O3 the float16 ones)."""
    directory = FIXTURES_DIR / name
    fp32_job = Job.of(directory / "input.py")
    cast_job = Job.of(directory / f"expected_{style}.py", env=DTYPE_ENVS[dtype])
    fp32, cast = run_scripts([fp32_job, cast_job])
    assert cast.ok, cast.explain()
    assert set(cast.train_dtypes) == {dtype}
    assert cast.autocast_forwards == 0  # O2/O3 do not patch functions
    if dtype == FLOAT16:
        at = overflow_step(cast)
        overflowed = Job(cast_job.path, env=cast_job.env, overflow_at=at)
        fp32, injected = run_scripts([fp32_twin(fp32_job, cast), overflowed])
        assert_survives_overflow(cast, injected, at, static_scale=style == "O3")
    assert all(math.isfinite(loss) for loss in cast.losses)
    assert len(cast.losses) == len(fp32.losses)
    assert cast.losses[-1] < cast.losses[0]
    assert cast.losses[-1] == pytest.approx(fp32.losses[-1], rel=0.2, abs=1e-2)


def test_o2_script_runs_at_o1_through_the_environment() -> None:
    directory = FIXTURES_DIR / "toplevel_loop"
    o1 = run_script(directory / "expected_O2.py", env={"AMPREWRITE_OPT_LEVEL": "O1"})
    assert o1.ok, o1.explain()
    assert BFLOAT16 in o1.train_dtypes and o1.autocast_forwards > 0


@pytest.mark.parametrize("dtype", LOW_PRECISION)
@pytest.mark.parametrize("level", ["O1", "O2"])
def test_migrated_apex_script_runs_without_apex(level: str, dtype: str, tmp_path) -> None:
    """apex is gone: the migrated script trains at the level it asks for, saves the scaler in
    its checkpoint and resumes from it; FP32 (O0 by environment) is the baseline."""
    script = FIXTURES_DIR / "migrate_apex_amp" / "expected_O1.py"
    checkpoint = tmp_path / "ckpt.pt"
    env = DTYPE_ENVS[dtype]
    fp32_job = Job.of(script, ["--opt-level", level], {"AMPREWRITE_OPT_LEVEL": "O0"})
    fp32, amp = run_scripts([
        fp32_job, Job.of(script, ["--opt-level", level, "--checkpoint", str(checkpoint)], env)])
    assert fp32.ok and amp.ok, amp.explain()
    assert set(fp32.train_dtypes) == {FLOAT32}
    assert dtype in amp.train_dtypes
    if dtype == FLOAT16:
        fp32 = fp32_twin(fp32_job, amp).run()
    assert amp.losses[-1] == pytest.approx(fp32.losses[-1], rel=0.1)
    resumed = run_script(script, ["--opt-level", level, "--resume", str(checkpoint)], env=env)
    assert resumed.ok, resumed.explain()
    assert resumed.losses[0] < amp.losses[0]  # it starts from the trained weights


def test_migrated_apex_switch_keeps_fp32_without_its_flag() -> None:
    """`import apex`, `apex.amp.initialize(models=..., enabled=args.fp16)`: migrated, the script
    trains in FP32 without `--fp16` (even where float16 is asked for), in each low-precision
    dtype with it, like FP32."""
    script = FIXTURES_DIR / "migrate_apex_package_keywords" / "expected_O1.py"
    off_job = Job.of(script, (), FLOAT16_ENV)
    off, *on = run_scripts([off_job, *(Job.of(script, ["--fp16"], DTYPE_ENVS[dtype])
                                       for dtype in LOW_PRECISION)])
    assert off.ok, off.explain()
    assert set(off.train_dtypes) == {FLOAT32} and not any(off.backward_scaled)
    for dtype, run in zip(LOW_PRECISION, on, strict=True):
        assert run.ok, run.explain()
        assert set(run.train_dtypes) == {dtype}
        fp32 = fp32_twin(off_job, run).run() if dtype == FLOAT16 else off
        assert run.losses[-1] == pytest.approx(fp32.losses[-1], rel=0.1)


def test_migrated_torch_cuda_amp_trains_on_the_scripts_own_device() -> None:
    """`torch.cuda.amp` on a CPU disables itself (the input trains in FP32); migrated with the
    script's device type, the training step autocasts on the CPU in the dtype it names."""
    directory = FIXTURES_DIR / "migrate_torch_cuda_amp_device"
    fp32_job = Job.of(directory / "input.py")
    fp32, *amp = run_scripts([fp32_job, *(Job.of(directory / "expected_O1.py", args)
                                          for args in ((), ("--float16",)))])
    assert fp32.ok, fp32.explain()
    assert set(fp32.train_dtypes) == {FLOAT32}
    for dtype, run in zip(LOW_PRECISION, amp, strict=True):
        assert run.ok, run.explain()
        assert set(run.train_dtypes) == {dtype}
        # the input's steps go through CUDA's (disabled) scaler, which an FP32 twin cannot
        # skip: compare with FP32 after as many steps as the run took
        taken = len(fp32.losses) - 1 - len(run.skipped_at)
        assert run.losses[-1] == pytest.approx(fp32.losses[taken], rel=0.1, abs=1e-3)


FAKE_FP16_UTILS = """\
class FP16_Optimizer:
    \"\"\"apex's FP16_Optimizer as far as the fixture uses it: a static loss scale.\"\"\"

    def __init__(self, optimizer, dynamic_loss_scale=False):
        self.optimizer, self.scale = optimizer, 128.0

    def zero_grad(self):
        self.optimizer.zero_grad()

    def backward(self, loss):
        (loss * self.scale).backward()

    def step(self):
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                p.grad.div_(self.scale)
        self.optimizer.step()
"""


def test_an_optional_apex_path_is_kept_and_the_default_path_rewritten(tmp_path: Path) -> None:
    """By default the rewrite trains in each low-precision dtype like FP32; with `--fp16` the
    apex path (a stand-in `apex.fp16_utils` beside the script) trains as written, in float16
    with its own loss scale, never through an enabled grad scaler."""
    directory = FIXTURES_DIR / "optional_apex_fp16_optimizer"
    script = tmp_path / "train.py"
    script.write_bytes((directory / "expected_O1.py").read_bytes())
    (tmp_path / "apex").mkdir()
    (tmp_path / "apex" / "__init__.py").write_text("")
    (tmp_path / "apex" / "fp16_utils.py").write_text(FAKE_FP16_UTILS)
    fp32_job = Job.of(directory / "input.py")
    fp32, apex, *amp = run_scripts([fp32_job, Job.of(script, ["--fp16"], FLOAT16_ENV),
                                    *(Job.of(script, (), DTYPE_ENVS[d]) for d in LOW_PRECISION)])
    assert fp32.ok and apex.ok, (fp32.explain(), apex.explain())
    assert set(apex.train_dtypes) == {FLOAT16} and not any(apex.backward_scaled)
    assert apex.optimizer_steps_taken == fp32.optimizer_steps_taken == 12
    for dtype, run in zip(LOW_PRECISION, amp, strict=True):
        assert run.ok, run.explain()
        assert set(run.train_dtypes) == {dtype}
        baseline = fp32_twin(fp32_job, run).run() if dtype == FLOAT16 else fp32
        assert run.losses[-1] == pytest.approx(baseline.losses[-1], rel=0.1, abs=1e-3)


LEGACY_AMP = b'''import torch
from torch.cpu.amp import autocast
from torch.cuda.amp import GradScaler

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
scaler = GradScaler(enabled=torch.cuda.is_available())
x, y = torch.randn(64, 8), torch.randn(64, 1)
for _ in range(5):
    optimizer.zero_grad()
    with autocast(True, torch.bfloat16):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
'''


def test_migrated_torch_cuda_amp_script_runs_on_the_cpu_without_deprecation(tmp_path) -> None:
    """bfloat16 only: the author's `autocast(True, torch.bfloat16)` fixes the dtype, and the
    migration keeps it (neither AMPREWRITE_DTYPE nor CUDA's defaults reach it)."""
    from amprewrite.engine import rewrite_source
    from amprewrite.options import Options

    migrated = rewrite_source(LEGACY_AMP, Options())
    assert b"torch.cpu.amp" not in migrated.source and b"torch.cuda.amp" not in migrated.source
    script = tmp_path / "legacy.py"
    script.write_bytes(migrated.source)
    run = run_script(script, env={"PYTHONWARNINGS": "error::FutureWarning"})
    assert run.ok, run.explain()
    assert BFLOAT16 in run.train_dtypes and len(run.losses) == 5


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_reproducible_rewrite_gives_bitwise_identical_runs(dtype: str) -> None:
    script = FIXTURES_DIR / "rule_reproducible" / "expected_O1_reproducible.py"
    env = {**ONE_THREAD, **DTYPE_ENVS[dtype]}
    first, second = run_script(script, env=env), run_script(script, env=env)
    assert first.ok, first.explain()
    assert first.losses == second.losses and len(first.losses) > 0  # exactly equal
    assert dtype in first.train_dtypes


RECURRENT = b'''import torch
import torch.nn as nn

torch.manual_seed(0)


class Tagger(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.rnn = cell(6, 16, num_layers=2, batch_first=True)
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out)


x, y = torch.randn(32, 5, 6), torch.randn(32, 5, 1)
for cell in (nn.LSTM, nn.GRU):
    model = Tagger(cell)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(12):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
'''


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_recurrent_models_train_in_low_precision(tmp_path, dtype: str) -> None:
    """LSTM and GRU rewrites run in both dtypes. This AVX2 CPU's oneDNN has no bfloat16 or
    float16 LSTM kernel ("could not create a primitive descriptor for the LSTM"): the
    runtime's regions run the LSTM in float32 there (tests/runtime/test_cpu_rnn.py), the
    Linear head in `dtype`."""
    from amprewrite.engine import rewrite_source
    from amprewrite.options import Options

    source, rewritten = tmp_path / "input.py", tmp_path / "rewritten.py"
    source.write_bytes(RECURRENT)
    rewritten.write_bytes(rewrite_source(RECURRENT, Options()).source)
    fp32_job = Job.of(source)
    fp32, amp = run_scripts([fp32_job, Job.of(rewritten, env=DTYPE_ENVS[dtype])])
    assert amp.ok, amp.explain()
    assert dtype in amp.train_dtypes and len(amp.losses) == len(fp32.losses) == 24
    if dtype == FLOAT16:
        fp32 = fp32_twin(fp32_job, amp).run()
        at = overflow_step(amp)
        assert_survives_overflow(amp, Job.of(rewritten, env=FLOAT16_ENV, overflow_at=at).run(),
                                 at)
    for model in (slice(0, 12), slice(12, 24)):  # LSTM, then GRU
        assert amp.losses[model][-1] == pytest.approx(fp32.losses[model][-1], rel=0.05)
