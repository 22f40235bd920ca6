"""Scripts whose forward passes and backward passes live in other functions: the rewrites run,
and the right forward passes run in low precision.

Each fixture's FP32 `input.py` and its `expected_O1.py` run in CPU subprocesses (see
`tests/execution.py`), the rewrite in bfloat16 and with `AMPREWRITE_DTYPE=float16` (dynamic
loss scaling on). Forward counts are of `nn.Linear` outputs: they tell which forward passes
ran under autocast and which stayed float32.

* a function that runs its own backward (an FGSM/PGD attack, a WGAN-GP gradient penalty, a
  MAML inner loop) is never called under autocast: its forward passes stay float32 and its
  backward is not loss-scaled;
* a forward-and-loss helper shared by training and evaluation (called in a generator
  expression and in a lambda) runs in low precision on every use;
* an inline `torch.autograd.grad` (an R1 penalty) takes the forward it differentiates out of
  the region with it;
* REINFORCE / actor-critic: the policy's forward in `select_action` runs in low precision,
  and `Categorical` gets float32 probabilities (its simplex check fails on bfloat16/float16
  ones for four actions).
"""

from __future__ import annotations

import math
import re
from functools import cache

import pytest

from tests.execution import BFLOAT16, FIXTURES_DIR, FLOAT16, FLOAT32, ScriptRun, run_script

ONE_THREAD = {"AMPREWRITE_TEST_THREADS": "1", "OMP_NUM_THREADS": "1"}
DTYPES = {"bfloat16": (BFLOAT16, ONE_THREAD),
          "float16": (FLOAT16, {**ONE_THREAD, "AMPREWRITE_DTYPE": "float16"})}


@cache
def _fp32(case: str, args: tuple[str, ...] = ()) -> ScriptRun:
    run = run_script(FIXTURES_DIR / case / "input.py", args, env=ONE_THREAD)
    assert run.ok, run.explain()
    assert set(run.train_dtypes) == {FLOAT32}
    return run


def _amp(case: str, dtype: str, args: tuple[str, ...] = ()) -> tuple[ScriptRun, str]:
    low, env = DTYPES[dtype]
    run = run_script(FIXTURES_DIR / case / "expected_O1.py", args, env=env)
    assert run.ok, run.explain()
    assert run.losses and all(math.isfinite(loss) for loss in run.losses), run.losses
    if dtype == "float16":
        assert any(run.backward_scaled), "no loss went through an enabled GradScaler"
    return run, low


def _train(run: ScriptRun, dtype: str) -> int:
    return run.dtype_counts.get("train", {}).get(dtype, 0)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


# 1. FGSM in epoch 0, PGD (torch.autograd.grad) in epoch 1: 8 batches each, 3 Linear layers.
ADVERSARIAL = "adversarial_fgsm_pgd"
ADVERSARIAL_ARGS = ("--epochs", "2")
TRAINING_STEPS = 16


@pytest.mark.parametrize("dtype", DTYPES)
def test_adversarial_attacks_run_outside_autocast_and_unscaled(dtype: str) -> None:
    fp32 = _fp32(ADVERSARIAL, ADVERSARIAL_ARGS)
    amp, low = _amp(ADVERSARIAL, dtype, ADVERSARIAL_ARGS)
    # the training forward (and only it) in low precision; every attack forward in float32
    assert _train(amp, low) == 3 * TRAINING_STEPS
    assert _train(amp, FLOAT32) == _train(fp32, FLOAT32) - 3 * TRAINING_STEPS
    attack_backwards = len(fp32.losses) - TRAINING_STEPS  # FGSM's `loss.backward()`
    assert attack_backwards == 8
    if dtype == "float16":  # the attack's input gradient is not loss-scaled
        assert amp.backward_scaled.count(False) == attack_backwards
        assert amp.backward_scaled.count(True) == TRAINING_STEPS
    assert _mean(amp.losses[-8:]) == pytest.approx(_mean(fp32.losses[-8:]), rel=0.03)


# 1b. An attack object's `perturb` (3 PGD steps) and an FGSM function, both differentiating
# with `torch.autograd.grad`, at module level: 8 batches x 3 epochs, 2 Linear layers.
ATTACK_OBJECT = "rule_attack_object_autograd_grad"
ATTACK_STEPS = 24


@pytest.mark.parametrize("dtype", DTYPES)
def test_attacks_differentiating_with_autograd_grad_stay_float32(dtype: str) -> None:
    fp32 = _fp32(ATTACK_OBJECT)
    amp, low = _amp(ATTACK_OBJECT, dtype)
    # two training forwards per step in low precision; the four attack forwards in float32
    assert _train(amp, low) == 2 * 2 * ATTACK_STEPS
    assert _train(amp, FLOAT32) == _train(fp32, FLOAT32) - 2 * 2 * ATTACK_STEPS
    assert len(amp.losses) == len(fp32.losses) == ATTACK_STEPS
    assert amp.losses[-1] == pytest.approx(fp32.losses[-1], rel=0.03)


# 2. WGAN-GP: per iteration G(z), D(real), D(fake), the penalty's D(interpolates), G(z), D(G(z)).
WGAN = "wgan_gp_penalty"
WGAN_ITERS = 30


@pytest.mark.parametrize("dtype", DTYPES)
def test_gradient_penalty_runs_in_float32_outside_autocast(dtype: str) -> None:
    args = ("--iters", str(WGAN_ITERS))
    fp32 = _fp32(WGAN, args)
    amp, low = _amp(WGAN, dtype, args)
    assert _train(amp, low) == 15 * WGAN_ITERS
    assert _train(amp, FLOAT32) == 3 * WGAN_ITERS  # the penalty's critic forward
    assert len(amp.losses) == len(fp32.losses) == 2 * WGAN_ITERS
    # the critic's loss falls from 8 to ~1.5; float16 skips its first step (scale 65536
    # overflows), so compare where the curve has flattened
    critic32, critic = fp32.losses[::2], amp.losses[::2]
    assert _mean(critic[-10:]) == pytest.approx(_mean(critic32[-10:]), abs=0.15)
    penalties = [float(v) for v in re.findall(r"gp ([-0-9.]+)", amp.stdout)]
    assert penalties and all(math.isfinite(p) for p in penalties)


# 3. MAML: 4 tasks per meta step, 2 inner steps (autograd.grad, create_graph) + 1 query forward.
MAML = "maml_inner_loop"
META_STEPS = 20


@pytest.mark.parametrize("dtype", DTYPES)
def test_maml_inner_loop_runs_in_float32_and_query_in_low_precision(dtype: str) -> None:
    args = ("--meta_steps", str(META_STEPS))
    fp32 = _fp32(MAML, args)
    amp, low = _amp(MAML, dtype, args)
    assert _train(amp, low) == META_STEPS * 4 * 3  # query forwards
    assert _train(amp, FLOAT32) == META_STEPS * 4 * 2 * 3  # inner-loop forwards
    assert amp.losses == pytest.approx(fp32.losses, rel=0.02)


# 4. REINFORCE: the policy runs in `select_action`; the loss is built in `finish_episode`.
REINFORCE = "reinforce_select_action"


@pytest.mark.parametrize("dtype", DTYPES)
def test_reinforce_policy_forward_runs_in_low_precision(dtype: str) -> None:
    args = ("--episodes", "20")
    fp32 = _fp32(REINFORCE, args)
    amp, low = _amp(REINFORCE, dtype, args)
    assert set(amp.train_dtypes) == {low}
    assert len(amp.losses) == len(fp32.losses) == 20
    # sampled trajectories diverge once a probability rounds differently: the first episode's
    # loss is comparable, the rest must only stay finite
    assert amp.losses[0] == pytest.approx(fp32.losses[0], rel=0.05)


# 5. Actor-critic with four actions: 40 episodes of 10 steps, 3 Linear layers per forward.
ACTOR_CRITIC = "actor_critic_select_action"


@pytest.mark.parametrize("dtype", DTYPES)
def test_actor_critic_forward_in_low_precision_with_float32_distribution(dtype: str) -> None:
    fp32 = _fp32(ACTOR_CRITIC)
    amp, low = _amp(ACTOR_CRITIC, dtype)
    assert _train(amp, low) == _train(fp32, FLOAT32) == 40 * 10 * 3
    assert len(amp.losses) == len(fp32.losses) == 40
    assert amp.losses[0] == pytest.approx(fp32.losses[0], rel=0.05)


# 6. compute_loss(model, batch) in training and, under no_grad, in a generator expression and
# a lambda: 20 training and 2 x 5 validation batches per epoch, 2 Linear layers.
SHARED = "shared_compute_loss"
VAL = r"val ([0-9.]+)"


@pytest.mark.parametrize("dtype", DTYPES)
def test_shared_forward_helper_runs_in_low_precision_in_training_and_evaluation(
    dtype: str,
) -> None:
    args = ("--epochs", "3")
    fp32 = _fp32(SHARED, args)
    amp, low = _amp(SHARED, dtype, args)
    assert amp.train_dtypes and set(amp.train_dtypes) == {low}
    assert amp.eval_dtypes == [low] * (3 * 2 * 5 * 2)
    val32 = [float(v) for v in re.findall(VAL, fp32.stdout)]
    val = [float(v) for v in re.findall(VAL, amp.stdout)]
    assert len(val) == len(val32) == 3
    assert val[-1] == pytest.approx(val32[-1], rel=0.05)
    assert _mean(amp.losses[-20:]) == pytest.approx(_mean(fp32.losses[-20:]), rel=0.05)


# 7. R1 penalty inline: `torch.autograd.grad(D(real).sum(), real, create_graph=True)` leaves
# the region with D(real); G(z), D(fake), G(z) and D(G(z)) stay in it (2 Linear layers each).
R1 = "r1_penalty_inline"


@pytest.mark.parametrize("dtype", DTYPES)
def test_inline_autograd_grad_and_what_it_differentiates_run_in_float32(dtype: str) -> None:
    fp32 = _fp32(R1)
    amp, low = _amp(R1, dtype)
    assert _train(amp, FLOAT32) == 40 * 2
    assert _train(amp, low) == 40 * 4 * 2
    assert _mean(amp.losses[-20:]) == pytest.approx(_mean(fp32.losses[-20:]), rel=0.05)
