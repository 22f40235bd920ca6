"""Every fixture pair: exact output, exact findings, idempotency, and output that compiles."""

from __future__ import annotations

import ast
import difflib

import libcst as cst
import pytest

from amprewrite.analysis import analyse
from amprewrite.catalog import Severity
from amprewrite.engine import rewrite_source
from amprewrite.report import exit_code
from amprewrite.runner import FileOutcome, Status, process_source
from tests.fixture_cases import FIXTURES, STYLES, Case, cases

CASES = cases()


# (fixture, style) -> its rewrite and findings: each case is rewritten once per session, not
# once per test that reads it.
_REWRITES: dict[tuple[str, str], tuple[bytes, str]] = {}


def _rewrite(case: Case) -> tuple[bytes, str]:
    key = (case.name, case.style)
    if key not in _REWRITES:
        result = rewrite_source(case.input.read_bytes(), case.options)
        findings = "".join(f.format("input.py") + "\n" for f in result.findings)
        _REWRITES[key] = result.source, findings
    return _REWRITES[key]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_output_matches_expected(case: Case, request: pytest.FixtureRequest) -> None:
    output, findings = _rewrite(case)
    original = case.input.read_bytes()
    if request.config.getoption("--update-fixtures"):
        if output != original:
            case.expected.write_bytes(output)
        elif case.expected.exists():
            case.expected.unlink()
        case.findings.write_text(findings)
    expected = case.expected.read_bytes() if case.expected.exists() else original
    assert output.decode() == expected.decode()
    assert findings == case.findings.read_text()


_SECOND_RUNS: dict[tuple[str, str], FileOutcome] = {}


def _second_run(case: Case) -> FileOutcome:
    """`amprewrite --check` on the case's output, as the runner does it."""
    key = (case.name, case.style)
    if key not in _SECOND_RUNS:
        once, _ = _rewrite(case)
        _SECOND_RUNS[key] = process_source("output.py", once, case.options, explicit=True)
    return _SECOND_RUNS[key]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_second_run_changes_nothing(case: Case) -> None:
    once, _ = _rewrite(case)
    twice = _second_run(case)
    assert twice.status is Status.UNCHANGED
    assert twice.after == once


# Inputs holding an AMP mistake that no rewrite fixes: `--check` on their output keeps failing
# on it, as it should (the finding says what to do by hand).
MISTAKES_LEFT = {
    "lint_existing_amp": {"AMP604"},  # a backward inside autocast
    "lint_bce_inside_autocast": {"AMP607"},  # an unsafe loss inside autocast
    "lint_float16_without_scaler": {"AMP610"},  # float16 autocast without a grad scaler
    "lint_half_cast_with_scaler": {"AMP608"},  # `.half()` by hand next to a grad scaler
    "lint_scaler_wrapper_class": {"AMP605"},  # the scaler cannot be named at that checkpoint
}


@pytest.mark.parametrize("case", CASES, ids=str)
def test_check_passes_on_the_output(case: Case) -> None:
    """`amprewrite FILE; amprewrite --check FILE` exits 0: the tool's output (a migration's
    `torch.amp` code too) holds no AMP mistake by its own lint."""
    outcome = _second_run(case)
    mistakes = {f.code for f in outcome.findings if f.severity is Severity.LINT}
    assert mistakes == MISTAKES_LEFT.get(case.name, set())
    assert exit_code([outcome], exit_zero=False, check=True) == (1 if mistakes else 0)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_output_compiles(case: Case) -> None:
    output, _ = _rewrite(case)
    compile(output, str(case.expected), "exec")


def test_there_are_enough_fixture_pairs() -> None:
    changed = {c.name for c in CASES if c.expected.exists()}
    assert len(changed) >= 8, changed


# Rewrites that O0 cannot take back to the letter, and what stays (correct FP32 code).
KEPT_BY_REVERT = {
    "rule_inline_loss": b"loss = loss_fn(net(x), y)",  # the hoisted loss variable
    # the hoisted loss, and float32 casts of what leaves autocast for the float32 penalty
    "rule_seeded_critic_variants": b"errD_fake = self.critic(fake.float())",
    "rule_bce_outside_autocast": b"p_real.float()",  # float32 inputs of the unsafe loss
    "rule_setup_then_single_step": b"loss = criterion(prediction, target)",
    "framework_enchanter": b"import torch\n",  # the import the scaler needed
    # the switch made the call too long for one line: its arguments stay one per line
    "framework_trl_configs": b"import torch\n",  # the import `torch.cuda.is_available()` needed
    "framework_accelerate": b"Accelerator(\n        gradient_accumulation_steps=2,\n    )",
    # float32 casts of autocast outputs, and forwards kept apart from a BCE loss
    "rule_escape_numpy_metrics": b"prediction.data.float().numpy()",
    "rule_escape_model_method": b"weights[0].detach().cpu().float().numpy()",
    "rule_escape_foreign_calls": b"accuracy(logits.detach().float(), y, top=2)",
    "rule_escape_zipped_paths": b"save_output_image(index, image_path, detections.float())",
    "rule_escape_logging": b'"train/probs": probs.float()',
    "rule_escape_returns_and_methods": b"meter.update(out.float(), yb)",
    "model_output_object": b"logits.cpu().float().numpy()",
    "model_returns_attention_list": b"last.detach().float().numpy()",
    "loss_object_mines_with_numpy": b"distances(embeddings).detach().cpu().float().numpy()",
    "attention_injected_submodules": b"torch.finfo(scores.dtype).min",
    "critics_built_in_one_tuple": b"q1.train_net(td_target.float(), s, a)",
    "rule_index_store_in_forward": b"(self.score(query, items[0]) * scores[keep]).float()",
    "model_tuple_int_output": b"scores.float().numpy().shape",
    "vae_loss_helper": b"loss_function(recon_batch.float(), data, mu, logvar)",
    "rule_bce_inline_forward": b"discriminator_out = discriminator(gen_imgs)",
    "rule_bce_inline_backward": b"bce(model_out.float(), y).backward()",
    "sigmoid_forward_bce": b"self.sigmoid(output.float())",
    "rule_sequential_sigmoid_bce": b"errD = criterion(output.float(), labels)",
    "rule_learner_object_backward": b"self.loss_func(self.pred.float(), y)",
    "rule_escape_samples_and_distances": b"payouts[action.numpy()]",  # `to_float32` taken out
    "rule_inplace_same_dtype_source": b"weights[i].to(target_pmfs[i].dtype)",
    "rule_index_put_low_target": b".to(\n        q_target.dtype\n    )",
    "rule_data_init_keeps_dtype": b".detach().to(self.s.dtype)",
    "rule_data_init_in_derived_flow": b".detach().to(self.s.dtype)",
    "attention_mask_fill": b"torch.finfo(att.dtype).min",  # the fill, right in every dtype
    "rule_lerp_mixed_dtypes": b"torch.lerp(a.float(), b.float(), w.float())",
    "rule_tanh_squash_log_prob": b"action = torch.tanh(z.float())",  # AMP136, every dtype
    "rule_sigmoid_manual_bce": b"p = model(x).float().sigmoid()",
    "kfac_hook_statistics": b"torch.linalg.eigh(self.covariances[layer].float())",
    # float32 values passed out of autocast: to a gradient penalty, to a distribution
    "wgan_gp_penalty": b"fake_imgs.data.float()",
    "rule_penalty_inputs_not_cast": b"gradient_penalty(out.float(), x_hat)",
    "reinforce_select_action": b"Categorical(probs.float())",
    "actor_critic_select_action": b"Categorical(probs.float())",
    "rule_distribution_in_region": b"Categorical(probs.float())",
    "rule_escape_sample_from_method": b"Categorical(logits=logits.float())",
    "rule_distribution_in_model_method": b"Normal(mu.float(), sigma.float())",
    "rule_distribution_arguments_not_tensors": b"Independent(Normal(mu.float(),",
    "rule_checkpoint": b'    "o": optimizer.state_dict(),\n',  # wrapped for the scaler's entry
}


def _fp32_input(case: Case) -> bool:
    """Inputs on an AMP API (torch.cuda.amp, apex, Ray's helpers) are migrated, not FP32."""
    analysis = analyse(cst.parse_module(case.input.read_bytes()))
    return analysis.existing_amp is None and not analysis.ray


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.style != "O0" and c.expected.exists() and _fp32_input(c)],
    ids=str,
)
def test_o0_turns_a_rewrite_back_into_its_fp32_original(case: Case) -> None:
    reverted = rewrite_source(case.expected.read_bytes(), STYLES["O0"]).source
    kept = KEPT_BY_REVERT.get(case.name)
    if kept is None or reverted.decode() == case.input.read_text():
        _assert_the_original(reverted.decode(), case)
    else:
        assert kept in reverted
        assert b"GradScaler" not in reverted and b"with autocast" not in reverted


def _assert_the_original(reverted: str, case: Case) -> None:
    """The revert is the FP32 original, but for the statements the rewrite wrapped
    (`line_fitting`) whose one line would pass the limit the revert reads (the rewrite's
    output's longest line: shorter where the wrapped line was the original's longest) or
    that the wrapping exploded one item per line with a trailing comma."""
    original = case.input.read_text()
    if reverted == original:
        return
    assert ast.dump(ast.parse(reverted)) == ast.dump(ast.parse(original))
    limit = max(79, *map(len, case.expected.read_text().splitlines()))
    before, after = original.splitlines(), reverted.splitlines()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, before, after).get_opcodes():
        exploded = j2 - j1 > 2 and after[j2 - 2].endswith(",")  # black keeps that too
        if tag != "equal":
            assert exploded or any(len(line) > limit for line in before[i1:i2]), before[i1:i2]


def test_o0_takes_the_float32_sigmoid_out_again() -> None:
    """`float32_sigmoid(nn.Sigmoid())` (AMP135) is the runtime's: O0 gives `nn.Sigmoid()`."""
    case = FIXTURES / "rule_sequential_sigmoid_bce"
    reverted = rewrite_source((case / "expected_O1.py").read_bytes(), STYLES["O0"]).source
    assert b"float32_sigmoid" not in reverted and b"amprewrite_runtime" not in reverted
    assert b"nn.Linear(64, 1),\n                                  nn.Sigmoid())" in reverted
