"""The command line: exit codes, --diff/--check, stdin, bad input, reporting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from amprewrite import __version__
from amprewrite.cli import main

TRAINING = b"""import torch
import torch.nn as nn
import torch.nn.functional as F

model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x = torch.randn(8, 4)
    y = torch.randint(0, 2, (8,))
    optimizer.zero_grad()
    out = model(x)
    loss = F.cross_entropy(out, y)
    loss.backward()
    optimizer.step()
"""
PLAIN_PYTHON = b"def add(a, b):\n    return a + b\n"


def _run(*args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), input=stdin)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def training(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_bytes(TRAINING)
    return path


@pytest.fixture
def plain(tmp_path: Path) -> Path:
    path = tmp_path / "util.py"
    path.write_bytes(PLAIN_PYTHON)
    return path


def test_rewrite_in_place_exits_1_then_0(training: Path) -> None:
    code, _, err = _run(str(training))
    assert code == 1
    assert b"scaler.scale(loss).backward()" in training.read_bytes()
    assert "AMP102" in err and "1 file rewritten" in err
    code, _, err = _run(str(training))
    assert code == 0 and "AMP002" in err


def test_nothing_to_change_exits_0_with_a_note(plain: Path) -> None:
    code, _, err = _run(str(plain))
    assert code == 0
    assert plain.read_bytes() == PLAIN_PYTHON
    assert f"{plain}:1:1: AMP001" in err


def test_exit_zero_opts_out_of_exit_1(training: Path) -> None:
    assert _run("--exit-zero", str(training))[0] == 0


@pytest.mark.parametrize("flags", [["--check"], ["--diff"], ["--check", "--diff"]])
def test_check_and_diff_write_nothing(training: Path, flags: list[str]) -> None:
    stat = training.stat()
    code, out, err = _run(*flags, str(training))
    assert code == 1
    assert training.read_bytes() == TRAINING
    assert training.stat().st_mtime_ns == stat.st_mtime_ns
    assert "would be rewritten" in err
    assert ("+    scaler.scale(loss).backward()" in out) == ("--diff" in flags)


def test_check_on_a_clean_file_exits_0(plain: Path) -> None:
    assert _run("--check", str(plain))[0] == 0


def test_stdin_to_stdout() -> None:
    code, out, err = _run("-", stdin=TRAINING)
    assert code == 1
    assert "scaler.scale(loss).backward()" in out
    assert "-:13:5: AMP102" in err


def test_stdin_filename_names_the_findings() -> None:
    _, _, err = _run("--stdin-filename", "train.py", "-", stdin=TRAINING)
    assert "train.py:13:5: AMP102" in err


def test_syntax_error_is_reported_and_the_other_files_still_processed(
    tmp_path: Path, training: Path
) -> None:
    broken = tmp_path / "broken.py"
    broken.write_bytes(b"import torch\nx = (\n")
    code, _, err = _run(str(broken), str(training))
    assert code == 123
    assert f"{broken}:3:1: AMP003 syntax error" in err
    assert "Traceback" not in err
    assert b"scaler.scale(loss)" in training.read_bytes()
    assert broken.read_bytes() == b"import torch\nx = (\n"


def test_non_utf8_without_a_coding_declaration_fails_clearly(tmp_path: Path) -> None:
    latin = tmp_path / "latin.py"
    latin.write_bytes(b'name = "caf\xe9"\n')
    code, _, err = _run(str(latin))
    assert code == 123
    assert "AMP004 cannot decode" in err


def test_latin1_with_a_coding_declaration_round_trips(tmp_path: Path) -> None:
    latin = tmp_path / "latin.py"
    source = b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + TRAINING
    latin.write_bytes(source)
    assert _run(str(latin))[0] == 1
    rewritten = latin.read_bytes()
    assert rewritten.startswith(b"# -*- coding: latin-1 -*-\n# caf\xe9\n")
    assert b"scaler.scale(loss)" in rewritten


def test_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    code, _, err = _run(str(tmp_path / "nope.py"))
    assert code == 2 and "no such file" in err


def test_plain_with_o2_is_a_usage_error(training: Path) -> None:
    code, _, err = _run("--plain", "--opt-level", "O2", str(training))
    assert code == 2 and "Error:" in err


def test_unknown_option_is_a_usage_error(training: Path) -> None:
    assert _run("--opt-level", "O9", str(training))[0] == 2


def test_directory_walk_is_sorted_and_skips_environments(tmp_path: Path) -> None:
    for relative in ("b.py", "a/z.py", "a/y.py", ".venv/v.py", "pkg/__pycache__/c.py",
                     "notes.txt"):
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(TRAINING)
    _, _, err = _run("--check", "-v", str(tmp_path))
    statuses = [line.split(":")[0] for line in err.splitlines() if line.endswith("changed")]
    assert statuses == [str(tmp_path / p) for p in ("a/y.py", "a/z.py", "b.py")]


def test_quiet_prints_errors_only(training: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_bytes(b"x = (\n")
    _, _, err = _run("-q", str(training), str(broken))
    assert err.splitlines() == [f"{broken}:2:1: AMP003 syntax error; amprewrite reads "
                                "Python 3 source, file left unchanged"]


def test_notes_for_walked_files_only_when_verbose(tmp_path: Path, plain: Path) -> None:
    assert "AMP001" not in _run(str(tmp_path))[2]
    assert "AMP001" in _run("-v", str(tmp_path))[2]


def test_version() -> None:
    assert _run("--version")[1].strip() == f"amprewrite {__version__}"


def test_python_dash_m_entry_point(training: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "amprewrite", "--check", str(training)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 1, result.stderr
    assert "AMP102" in result.stderr


def test_an_internal_error_becomes_a_finding(
    training: Path, plain: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import amprewrite.runner as runner

    def explode(source: bytes, options: object) -> None:
        raise KeyError("boom")

    monkeypatch.setattr(runner, "rewrite_source", explode)
    code, _, err = _run(str(training), str(plain))
    assert code == 123
    assert err.count("AMP004 internal error (KeyError") == 2
    assert "Traceback" not in err


def test_diff_is_coloured_only_on_a_terminal(training: Path) -> None:
    result = CliRunner().invoke(main, ["--diff", str(training)], color=True)
    assert "\x1b[32m+" in result.stdout
    assert "\x1b[" not in _run("--diff", str(training))[1]


def test_read_only_file_is_left_alone(training: Path) -> None:
    training.chmod(0o444)
    code, _, err = _run(str(training))
    assert code == 123 and "permission denied" in err
    assert training.read_bytes() == TRAINING


@pytest.mark.parametrize(
    ("flags", "explanation"),
    [
        (["--opt-level", "O1", "--master-weights"], "FP32 master weights make no sense"),
        (["--opt-level", "O1", "--keep-batchnorm-fp32"], "does not apply"),
        (["--opt-level", "O1", "--no-keep-batchnorm-fp32"], "does not apply"),
        (["--opt-level", "O0", "--loss-scale", "128"], "O0 is pure FP32"),
        (["--opt-level", "O0", "--loss-scale", "dynamic"], "O0 is pure FP32"),
        (["--opt-level", "O0", "--master-weights"], "O0 is pure FP32"),
        (["--opt-level", "O0", "--keep-batchnorm-fp32"], "O0 is pure FP32"),
        (["--opt-level", "O0", "--dtype", "float16"], "O0 is pure FP32"),
        (["--plain", "--opt-level", "O2"], "has no O2/O3"),
        (["--plain", "--opt-level", "O3"], "has no O2/O3"),
        (["--plain", "--loss-scale", "64"], "dynamic loss scaling only"),
        (["--loss-scale", "-1"], "must be positive"),
        (["--loss-scale", "lots"], "'dynamic' or a positive number"),
    ],
)
def test_invalid_opt_level_combinations_are_refused(
    training: Path, flags: list[str], explanation: str
) -> None:
    code, _, err = _run(*flags, str(training))
    assert code == 2
    assert explanation in err
    assert training.read_bytes() == TRAINING


@pytest.mark.parametrize(
    ("flags", "constructor"),
    [
        (["--opt-level", "O2"], 'GradScaler("O2")'),
        (["--opt-level", "O3", "--keep-batchnorm-fp32"],
         'GradScaler("O3", keep_batchnorm_fp32=True)'),
        (["--opt-level", "O2", "--no-master-weights", "--loss-scale", "512"],
         'GradScaler("O2", master_weights=False, loss_scale=512.0)'),
        (["--loss-scale", "128"], "GradScaler(loss_scale=128.0)"),
        (["--dtype", "float16"], 'GradScaler(dtype="float16")'),
    ],
)
def test_opt_level_properties_reach_the_scaler(
    training: Path, flags: list[str], constructor: str
) -> None:
    assert _run(*flags, str(training))[0] == 1
    rewritten = training.read_text()
    assert f"scaler = {constructor}\n" in rewritten
    assert ("scaler.initialize(model, optimizer)" in rewritten) == ("O2" in flags or "O3" in flags)
