"""What a newcomer meets in the second hour (issue 26): the report's streams and colour,
flags and config checked, messages in the mode asked for, generated code's style, --explain."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from amprewrite.cli import main
from amprewrite.code_index import codes
from amprewrite.explain import explanation
from tests.test_cli import TRAINING


def _run(*args: str, stdin: bytes | None = None, color: bool = False,
         env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), input=stdin, color=color, env=env)
    return result.exit_code, result.stdout, result.stderr


# --- output streams -------------------------------------------------------------------------


def test_json_from_stdin_goes_to_stderr_and_stdout_holds_only_python() -> None:
    code, out, err = _run("--output-format", "json", "-", stdin=TRAINING)
    assert code == 1
    compile(out, "<stdout>", "exec")
    assert "scaler.scale(loss).backward()" in out and "AMP102" not in out
    report = json.loads(err)
    assert report["files"][0]["path"] == "-"


def test_github_annotations_from_stdin_go_to_stderr() -> None:
    _, out, err = _run("--output-format", "github", "-", stdin=TRAINING)
    assert "::notice" not in out
    assert "title=AMP104 optimizer step routed through the scaler::" in err
    compile(out, "<stdout>", "exec")


def test_reports_stay_on_stdout_when_no_code_is_written_there(tmp_path: Path) -> None:
    _, out, _ = _run("--check", "--output-format", "json", "-", stdin=TRAINING)
    assert json.loads(out)["files"][0]["status"] == "would be rewritten"
    (tmp_path / "train.py").write_bytes(TRAINING)
    _, out, _ = _run("--output-format", "json", str(tmp_path / "train.py"))
    assert json.loads(out)["summary"] == "1 file rewritten"


@pytest.mark.parametrize(("env", "coloured"), [
    ({}, True), ({"NO_COLOR": "1"}, False), ({"NO_COLOR": ""}, True),
])
def test_no_color_turns_the_diff_colour_off(
    tmp_path: Path, env: dict[str, str], coloured: bool
) -> None:
    (tmp_path / "train.py").write_bytes(TRAINING)
    _, out, _ = _run("--diff", str(tmp_path / "train.py"), color=True, env=env)
    assert ("\x1b[32m+" in out) is coloured and "+    scaler.update()" in out


def test_force_color_colours_the_diff_off_a_terminal(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_bytes(TRAINING)
    _, out, _ = _run("--diff", str(tmp_path / "train.py"), env={"FORCE_COLOR": "1"})
    assert "\x1b[32m+" in out
    _, out, _ = _run("--diff", str(tmp_path / "train.py"),
                     env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert "\x1b[" not in out


# --- flags and config -----------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / ".git").mkdir()
    (tmp_path / "train.py").write_bytes(TRAINING)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(("flags", "message"), [
    (["--seed", "3"], "--seed only applies with --reproducible"),
    (["--select", "XYZ"], "--select: no finding code starts with 'XYZ'; a code or a prefix"),
    (["--ignore", "AMP102,amp1"], "--ignore: no finding code starts with 'amp1'"),
    (["--select", "AMP10200"], "--select: no finding code starts with 'AMP10200'; did you mean"),
])
def test_meaningless_flags_are_usage_errors_with_the_fix(
    project: Path, flags: list[str], message: str
) -> None:
    code, _, err = _run("--check", *flags, "train.py")
    assert code == 2 and message in err
    assert "add --reproducible" in err or "`amprewrite --explain CODE`" in err


@pytest.mark.parametrize("flags", [["--seed", "3", "--reproducible"], ["--select", "AMP1"],
                                   ["--ignore", "AMP101,AMP6"], ["--select", "AMP"]])
def test_meaningful_flags_still_run(project: Path, flags: list[str]) -> None:
    assert _run("--check", *flags, "train.py")[0] == 1


@pytest.mark.parametrize(("line", "message"), [
    ("seed = 3", "seed in [tool.amprewrite] of {} only applies with --reproducible"),
    ('select = ["XYZ"]', "select in [tool.amprewrite] of {}: no finding code starts with"),
    ('select = "AMP1"', 'select in [tool.amprewrite] of {}: expected a list of strings, got '
                        '"AMP1" (a string); write e.g. select = ["AMP1"]'),
    ("seed = true", "seed in [tool.amprewrite] of {}: expected an integer, got true"),
    ("loss-scale = true", 'loss-scale in [tool.amprewrite] of {}: expected "dynamic" or a number'),
    ('opt-level = "O5"', 'opt-level in [tool.amprewrite] of {}: expected one of "O0", "O1", '
                         '"O2", "O3", got "O5" (a string); write e.g. opt-level = "O1"'),
    ('exclude = "(("', "exclude in [tool.amprewrite] of {}: expected a regular expression"),
])
def test_config_errors_name_the_key_the_file_the_type_and_the_fix(
    project: Path, line: str, message: str
) -> None:
    pyproject = project / "pyproject.toml"
    pyproject.write_text(f"[tool.amprewrite]\n{line}\n")
    code, _, err = _run("--check", "train.py")
    assert code == 2 and message.format(pyproject) in " ".join(err.split())


def test_a_config_seed_with_reproducible_runs(project: Path) -> None:
    (project / "pyproject.toml").write_text("[tool.amprewrite]\nseed = 3\nreproducible = true\n")
    assert _run("--check", "train.py")[0] == 1


# --- wording: what happened, or would, to this file -----------------------------------------

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def test_json_and_text_say_the_same_under_check(project: Path) -> None:
    _, _, text = _run("--check", "train.py")
    _, out, _ = _run("--check", "--output-format", "json", "train.py")
    messages = [f["message"] for f in json.loads(out)["files"][0]["findings"]]
    assert "grad scaler `scaler` would be created right after the optimizer is built" in messages
    assert all(f" {message}" in text for message in messages)


@pytest.mark.parametrize(("case", "flags", "expected"), [
    ("migrate_torch_cuda_amp", ["--diff"], "AMP401 `torch.cuda.amp.GradScaler` (deprecated since "
     "torch 2.4) would be migrated to `torch.amp.GradScaler` with device type \"cuda\""),
    ("migrate_apex_behind_flag", ["--diff"], "AMP160 model would be cast by `scaler.initialize("
     "model, optimizer, opt_level=args.opt_level if args.amp else \"O0\")` when the opt level "
     "it runs at is O2 or O3"),
    ("toplevel_loop", ["--check", "--opt-level", "O2"], "AMP160 model would be cast for O2 by "
     "`scaler.initialize(model, optimizer)`"),
])
def test_migrations_and_model_casts_say_what_would_happen(
    case: str, flags: list[str], expected: str
) -> None:
    err = _run(*flags, str(FIXTURES / case / "input.py"))[2]
    assert expected in err and "after the rewrite" not in err


def test_a_read_only_file_is_told_what_would_have_changed(project: Path) -> None:
    (project / "train.py").chmod(0o444)
    code, _, err = _run("train.py")
    assert code == 123 and "AMP004 cannot write: permission denied (read-only file)" in err
    assert "`optimizer.step()` would be routed through `scaler.step(optimizer)`" in err
    assert " routed through" not in err.replace("would be routed", "")
    _, out, _ = _run("--output-format", "json", "train.py")
    assert "would be routed through" in out


# --- explain a code -------------------------------------------------------------------------


def test_explain_prints_the_title_why_what_to_do_and_an_example() -> None:
    code, out, _ = _run("--explain", "AMP212")
    assert code == 0
    assert out.startswith("AMP212 (skip): optimizer bound only on some paths\n")
    assert "Why it fires: The stepped optimizer is created inside a branch" in out
    assert "What to do: The stepped optimizer is created inside a branch" in out
    assert "Example:\n\n    if args.sgd:\n        optimizer = torch.optim.SGD(params)" in out


def test_explain_takes_a_lower_case_code_and_shows_a_rule_example_as_a_diff() -> None:
    code, out, _ = _run("--explain", "amp104")
    assert code == 0 and out.startswith("AMP104 (change): ")
    assert "\n    +    scaler.step(optimizer)\n" in out


def test_explain_of_an_unknown_code_is_a_usage_error_with_the_codes_it_resembles() -> None:
    code, _, err = _run("--explain", "AMP99")
    assert code == 2 and "no finding code 'AMP99'; did you mean " in err
    assert "AMP609" in err.split("did you mean ", 1)[1].split("?")[0].split(" or ")


@pytest.mark.parametrize("code", sorted(codes()))
def test_every_code_has_an_explanation(code: str) -> None:
    text = explanation(codes()[code])
    why = codes()[code].why
    assert len(why) > 30 and why.endswith(".")
    heading, _, rest = text.partition("\n\n")
    assert heading == f"{code} ({codes()[code].severity.value}): {codes()[code].title}"
    shown = rest.split("Example:\n\n", 1)[1]
    assert shown.strip() and all(line.startswith("    ") for line in shown.splitlines() if line)


# --- coverage you can see: evaluation without no_grad ----------------------------------------

VALIDATION = """import torch
import torch.nn.functional as F

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    model.train()
    for x, y in train_loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    model.eval()
    correct = 0
    for x, y in val_loader:
{guard}        out = model(x)
        correct += (out.argmax(1) == y).sum().item()
"""


def _rewrite(source: str) -> tuple[str, list[str]]:
    from amprewrite.engine import rewrite_source
    from amprewrite.options import Options

    result = rewrite_source(source.encode(), Options())
    return result.source.decode(), [f"{f.line}:{f.col}: {f.code} {f.message}"
                                    for f in result.findings]


def test_a_validation_loop_without_no_grad_is_reported_where_it_is() -> None:
    rewritten, findings = _rewrite(VALIDATION.format(guard=""))
    assert ("16:15: AMP217 `model(...)` runs outside the training step and not under "
            "`torch.no_grad()`: left in FP32, as it may need gradients (under `no_grad`, "
            "evaluation is wrapped in autocast)") in findings
    assert "        out = model(x)\n" in rewritten  # left as it was


def test_a_validation_loop_under_no_grad_is_wrapped_not_reported() -> None:
    source = VALIDATION.format(guard="        with torch.no_grad():\n").replace(
        "        out = model(x)\n        correct", "            out = model(x)\n        correct")
    rewritten, findings = _rewrite(source)
    assert not [f for f in findings if "AMP217" in f]
    assert any("AMP106" in f for f in findings) and "with autocast():" in rewritten


def test_a_forward_pass_in_a_loop_that_computes_gradients_is_not_reported() -> None:
    source = VALIDATION.format(guard="").replace(
        "        correct += (out.argmax(1) == y).sum().item()\n",
        "        out.sum().backward()  # saliency: gradients of the inputs\n")
    assert not [f for f in _rewrite(source)[1] if "AMP217" in f]


# --- generated code's style: imports where isort puts them -----------------------------------

ISORTED = """\"\"\"Train.\"\"\"
import os

{third_party}

from mypkg.models import Net

model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(os.environ):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
"""


def _isort_problems(path: Path, *settings: str) -> str:
    import subprocess
    import sys

    options = [f"--config=lint.isort.{setting}" for setting in
               ("known-first-party = ['mypkg']", *settings)]
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--isolated", "--select", "I",
                           *options, str(path)], capture_output=True, text=True, check=False)
    return "" if done.returncode == 0 else done.stdout + done.stderr


@pytest.mark.parametrize(("third_party", "settings", "expected"), [
    ("import numpy as np\nimport torch\nimport torch.nn.functional as F\n"
     "from torch.utils.data import DataLoader", (),
     "import torch.nn.functional as F\nfrom amprewrite_runtime import GradScaler, autocast\n"
     "from torch.utils.data import DataLoader\n"),
    ("import torch\nimport torch.nn.functional as F\nfrom torch.utils.data import DataLoader", (),
     "from amprewrite_runtime import GradScaler, autocast\nfrom torch.utils.data import "
     "DataLoader\n\nfrom mypkg"),
    ("import numpy as np\nfrom torch import optim\nimport torch.nn.functional as F",
     ("force-sort-within-sections = true",),
     "import os\n\nfrom amprewrite_runtime import GradScaler, autocast\nimport numpy as np\n"),
])
def test_the_runtime_import_goes_where_isort_puts_it(
    tmp_path: Path, third_party: str, settings: tuple[str, ...], expected: str
) -> None:
    script = tmp_path / "train.py"
    script.write_text(ISORTED.format(third_party=third_party))
    assert _isort_problems(script, *settings) == ""  # the input is isort-clean
    assert _run(str(script))[0] == 1
    assert expected in script.read_text()
    assert _isort_problems(script, *settings) == ""


# --- generated code's style: the line length -------------------------------------------------

APEX = """import argparse

import torch
from apex import amp


def main(args):
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(model, optimizer, opt_level=args.opt_level,
                                      keep_batchnorm_fp32=args.keep_batchnorm_fp32,
                                      loss_scale=args.loss_scale)
    for step in range(3):
        optimizer.zero_grad()
        loss = model(torch.randn(8, 4)).sum()
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
"""
ONE_LINE = ("    scaler = GradScaler(args.opt_level, keep_batchnorm_fp32=args.keep_batchnorm_fp32, "
            "loss_scale=args.loss_scale)\n")
ONE_PER_LINE = """    scaler = GradScaler(
        args.opt_level,
        keep_batchnorm_fp32=args.keep_batchnorm_fp32,
        loss_scale=args.loss_scale,
    )
"""


def test_the_apex_migration_keeps_to_the_files_line_length() -> None:
    rewritten, _ = _rewrite(APEX)
    assert ONE_PER_LINE in rewritten
    assert max(map(len, rewritten.splitlines())) <= max(map(len, APEX.splitlines()))


@pytest.mark.parametrize(("name", "text", "expected"), [
    ("pyproject.toml", "[tool.black]\nline-length = 120\n", ONE_LINE),
    ("pyproject.toml", "[tool.ruff]\nline-length = 100\n[tool.black]\nline-length = 120\n",
     "    scaler = GradScaler(\n        args.opt_level, keep_batchnorm_fp32="
     "args.keep_batchnorm_fp32, loss_scale=args.loss_scale\n    )\n"),
    ("setup.cfg", "[flake8]\nmax-line-length = 120\n", ONE_LINE),
    ("tox.ini", "[flake8]\nmax-line-length = 79\n", ONE_PER_LINE),
    (".flake8", "[flake8]\nmax_line_length = 120\n", ONE_LINE),
    ("ruff.toml", "line-length = 120\n", ONE_LINE),
])
def test_the_projects_configured_line_length_wins(
    project: Path, name: str, text: str, expected: str
) -> None:
    (project / "sub").mkdir()
    (project / "sub" / "train.py").write_text(APEX)
    (project / name).write_text(text)
    assert _run(str(project / "sub" / "train.py"))[0] == 1
    assert expected in (project / "sub" / "train.py").read_text()


def test_a_modules_own_methods_are_not_reported_even_without_forward() -> None:
    """cleanrl's PPO `Agent` is an `nn.Module` with `get_value` and `get_action` but no
    `forward`: its calls of its own layers run wherever its callers run them (under the
    training step's autocast, under the rollout's `no_grad`), not as unguarded forwards."""
    source = """import torch
import torch.nn as nn


class Agent(nn.Module):
    def __init__(self):
        super().__init__()
        self.critic = nn.Linear(4, 1)
        self.actor = nn.Linear(4, 2)

    def get_value(self, x):
        return self.critic(x)

    def get_action(self, x):
        return self.actor(x).argmax(-1)


agent = Agent()
optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3)
for obs, ret in batches:
    loss = (agent.get_value(obs) - ret).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""
    rewritten, findings = _rewrite(source)
    assert "scaler.scale(loss).backward()" in rewritten
    assert not [f for f in findings if "AMP217" in f], findings
