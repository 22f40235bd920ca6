"""What a newcomer meets in the second hour (issue 26): the report's streams and colour,
flags and config checked, messages in the mode asked for, generated code's style, --explain."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from amprewrite.cli import main
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
    assert "::notice" not in out and "title=AMP104::" in err
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
