"""What a newcomer meets first: error positions, config typos, excludes under pre-commit, the
wording of --check/--diff and the hints at the end of a run (issue 17)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from amprewrite.catalog import Severity
from amprewrite.cli import main
from amprewrite.code_index import codes
from amprewrite.install_source import install_command
from amprewrite.report import IF_NOT_CONJUGATED, conditional
from tests.test_cli import TRAINING

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
RUNTIME_HINT = "amprewrite_runtime: where they train, run `pip install "


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / ".git").mkdir()
    for relative in ("train.py", "legacy/old_train.py"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_bytes(TRAINING)
    (tmp_path / "pyproject.toml").write_text('[tool.amprewrite]\nexclude = "/legacy/"\n')
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(("source", "position", "reason"), [
    (b"import torch\nx = 1\ny = (1,\nz = 2\n", "3:5", "'(' was never closed"),
    (b"import torch\nif x:\npass\n", "3:1", "expected an indented block after 'if' statement"),
    (b"import torch\nprint 'x'\n", "2:1", "Missing parentheses in call to 'print'"),
])
def test_syntax_errors_are_reported_where_and_why_python_does(
    tmp_path: Path, source: bytes, position: str, reason: str
) -> None:
    path = tmp_path / "broken.py"
    path.write_bytes(source)
    code, _, err = _run(str(path))
    assert code == 123
    assert f"{path}:{position}: AMP003 cannot parse: {reason}" in err


@pytest.mark.parametrize(("key", "suggestion"), [
    ("opt_level", "opt-level"), ("extend_exclude", "extend-exclude"), ("dtyp", "dtype"),
    ("Force-Exclude", "force-exclude"),
])
def test_an_unknown_config_key_gets_a_did_you_mean(
    project: Path, key: str, suggestion: str
) -> None:
    (project / "pyproject.toml").write_text(f'[tool.amprewrite]\n{key} = "O2"\n')
    code, _, err = _run("train.py")
    assert code == 2 and f"unknown key {key!r}" in err
    assert f"did you mean {suggestion!r}?" in err


def test_an_unknown_config_key_far_from_any_lists_the_known_ones(project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.amprewrite]\ncolour = "red"\n')
    code, _, err = _run("train.py")
    assert code == 2 and "did you mean" not in err and "known: docs-url, dtype, exclude" in err


def test_force_exclude_applies_the_excludes_to_named_files(project: Path) -> None:
    code, _, err = _run("--check", "legacy/old_train.py")  # named: processed, as before
    assert code == 1 and "legacy/old_train.py" in err
    code, _, err = _run("--check", "--force-exclude", "train.py", "legacy/old_train.py")
    assert code == 1 and "legacy/old_train.py:" not in err and "train.py:" in err
    code, _, err = _run("--check", "--force-exclude", "legacy/old_train.py")
    assert code == 0 and "no Python files to process: all excluded (1 path matched" in err
    assert (project / "legacy" / "old_train.py").read_bytes() == TRAINING


def test_force_exclude_can_be_set_in_the_config(project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.amprewrite]\nexclude = "/legacy/"\n'
                                            "force-exclude = true\n")
    assert _run("--check", "legacy/old_train.py")[0] == 0


def test_a_directory_whose_files_are_all_excluded_says_so(project: Path) -> None:
    (project / "train.py").unlink()
    code, _, err = _run(".")
    assert code == 0 and err == ("no Python files to process: all excluded (1 path matched "
                                 "exclude, extend-exclude or .gitignore); nothing to do\n")
    (project / "notes").mkdir()
    (project / "notes" / "a.py").write_bytes(TRAINING)
    (project / "notes" / "b.py").write_bytes(TRAINING)
    (project / ".gitignore").write_text("notes/*.py\n")
    assert "all excluded (3 paths matched" in _run(".")[2]
    assert _run(str(project / "notes" / "none"))[0] == 2  # missing: still a usage error
    (project / "empty").mkdir()
    assert _run("empty")[2] == "no Python files found; nothing to do\n"


def test_check_and_diff_use_the_conditional_and_end_with_the_applying_command(
    project: Path,
) -> None:
    code, _, err = _run("--check", "--opt-level", "O2", "-v", "--jobs", "1", "train.py")
    assert code == 1
    assert "AMP104 `optimizer.step()` would be routed through `scaler.step(optimizer)`" in err
    assert "AMP101 forward pass and loss would be wrapped in" in err
    assert err.splitlines()[-2] == "to apply these changes: amprewrite --opt-level O2 train.py"
    assert RUNTIME_HINT not in err  # --check is about failing, not about training
    _, out, err = _run("--diff", "train.py")
    assert "would be routed through" in err and "+    scaler.step(optimizer)" in out
    assert "rewritten files would import amprewrite_runtime" in err  # the diff shows it
    assert err.splitlines()[-2] == "to apply these changes: amprewrite train.py"
    assert (project / "train.py").read_bytes() == TRAINING


def test_a_rewrite_reports_what_was_done_and_the_runtime_it_needs_once(project: Path) -> None:
    (project / "second.py").write_bytes(TRAINING)
    code, _, err = _run("train.py", "second.py")
    assert code == 1
    assert "AMP104 `optimizer.step()` routed through" in err and "would" not in err
    assert err.count(RUNTIME_HINT) == 1 and "--plain for torch.amp only" in err
    assert "to apply" not in err
    assert RUNTIME_HINT not in _run("train.py")[2]  # nothing rewritten this time


@pytest.mark.parametrize("flags", [["--plain"], ["-q"], ["--output-format", "json"]])
def test_no_runtime_hint_for_plain_quiet_or_machine_output(project: Path, flags: list[str]) -> None:
    assert RUNTIME_HINT not in _run(*flags, "train.py")[2]


def test_github_annotations_use_the_conditional_under_check(project: Path) -> None:
    _, out, _ = _run("--check", "--output-format", "github", "train.py")
    assert ("title=AMP104 optimizer step routed through the scaler::`optimizer.step()` would be "
            "routed through") in out


def _change_messages() -> set[tuple[str, str]]:
    """Every CHANGE finding's message in the fixtures' expected findings."""
    messages = set()
    for path in FIXTURES.glob("*/findings_*.txt"):
        for line in path.read_text().splitlines():
            found = re.match(r".*?:\d+:\d+: (AMP\d+) (.*)", line)
            if found and found[1] in codes() and codes()[found[1]].severity is Severity.CHANGE:
                messages.add((found[1], found[2]))
    return messages


def test_every_change_message_has_a_conditional_form() -> None:
    messages = _change_messages()
    assert len(messages) > 30
    for code, message in messages:
        mood = conditional(message)
        assert mood != message and not mood.startswith(IF_NOT_CONJUGATED), (code, message)
        assert "would be deprecated" not in mood and "would be shuffled" not in mood


@pytest.mark.parametrize(("message", "expected"), [
    ("`optimizer.step()` routed through `scaler.step(optimizer)`",
     "`optimizer.step()` would be routed through `scaler.step(optimizer)`"),
    ("shuffled DataLoader seeded from `seeding` (`generator=`)",
     "shuffled DataLoader would be seeded from `seeding` (`generator=`)"),
    ("deprecated `train.torch.backward(loss)` replaced by a scaled `loss.backward()`",
     "deprecated `train.torch.backward(loss)` would be replaced by a scaled `loss.backward()`"),
    ("`x.fixed(...)` added", "`x.fixed(...)` would be added"),  # not inside code
    ("`Accelerator(...)` owns precision: `mixed_precision=1` added (no scaler)",
     "`Accelerator(...)` owns precision: `mixed_precision=1` would be added (no scaler)"),
    ("`scaler.initialize(model, optimizer)` casts the model for O2",
     IF_NOT_CONJUGATED + "`scaler.initialize(model, optimizer)` casts the model for O2"),
])
def test_conditional(message: str, expected: str) -> None:
    assert conditional(message) == expected


SAVE = """import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "c.pt")
"""


def test_a_checkpoint_line_made_too_long_is_wrapped_as_the_surrounding_code() -> None:
    from amprewrite.engine import rewrite_source
    from amprewrite.options import Options

    rewritten = rewrite_source(SAVE.encode(), Options()).source.decode()
    assert """    torch.save({
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict(),
    }, "c.pt")
""" in rewritten
    assert max(len(line) for line in rewritten.splitlines()) <= 79
    wide = SAVE + "# " + "x" * 128 + "\n"  # a file whose lines reach 130 columns: not wrapped
    rewritten = rewrite_source(wide.encode(), Options()).source.decode()
    assert '"optimizer": optimizer.state_dict(), "scaler": scaler.state_dict()}, "c.pt")' in (
        rewritten)


README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train.py"


def _first_run_session() -> list[list[str]]:
    """The README's first-run console session, split at each `$ ` command: [command, output...]."""
    start = README.index("$ cp examples/train.py train.py")
    block = README[start:README.index("```", start)]
    sessions: list[list[str]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            sessions.append([line[2:]])
        else:
            sessions[-1].append(line)
    return sessions


def test_the_readme_first_run_shows_what_amprewrite_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = _first_run_session()
    assert [s[0] for s in sessions] == ["cp examples/train.py train.py", "python train.py",
                                        "amprewrite train.py", "python train.py"]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_bytes(EXAMPLE.read_bytes())
    _, _, err = _run("train.py")
    shown = [line.replace("pip install '.[runtime]'", install_command())  # run in the clone
             for line in sessions[2][1:]]
    assert err.splitlines() == shown


def _losses(lines: list[str]) -> list[tuple[float, float]]:
    found = [re.search(r"train loss ([\d.]+)  test loss ([\d.]+)", line) for line in lines]
    return [(float(m[1]), float(m[2])) for m in found if m]


@pytest.mark.slow
def test_the_first_run_example_learns_in_fp32_and_with_amp(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from tests.execution import RUNTIME_DIR

    script = tmp_path / "train.py"
    script.write_bytes(EXAMPLE.read_bytes())
    env = {**os.environ, "PYTHONPATH": str(RUNTIME_DIR), "CUDA_VISIBLE_DEVICES": ""}
    env.pop("AMPREWRITE_DTYPE", None)
    runs = []
    for rewrite in (False, True):
        if rewrite:
            assert _run(str(script))[0] == 1
            assert "with autocast():" in script.read_text()
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                              text=True, timeout=300, check=True)
        runs.append(_losses(done.stdout.splitlines()))
    shown = [_losses(session) for session in _first_run_session() if session[0] ==
             "python train.py"]
    for losses, readme in zip(runs, shown, strict=True):
        assert len(losses) == 4
        (first_train, first_test), (last_train, last_test) = losses[0], losses[-1]
        assert last_train < first_train / 10 and last_test < first_test / 2  # it learns
        assert first_train == pytest.approx(2.09, abs=0.1)  # from ln(10): nothing learnt yet
        flat = [loss for pair in losses for loss in pair]
        shown_flat = [loss for pair in readme for loss in pair]
        assert flat == pytest.approx(shown_flat, rel=0.1, abs=0.02)  # the README's real run


def test_the_applying_command_names_many_files_by_the_paths_given(project: Path) -> None:
    for index in range(6):
        (project / "src" / f"t{index}.py").parent.mkdir(exist_ok=True)
        (project / "src" / f"t{index}.py").write_bytes(TRAINING)
    err = _run("--check", "--plain", "src")[2]
    assert err.splitlines()[-2] == "to apply these changes: amprewrite --plain src"
    err = _run("--check", "src/t0.py", "src")[2]  # six files: more than five, named by the paths
    assert err.splitlines()[-2] == "to apply these changes: amprewrite src/t0.py src"
