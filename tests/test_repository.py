"""Repository-scale runs: [tool.amprewrite] config, excludes and .gitignore, select/ignore and
inline suppressions, parallel jobs, machine-readable output, the cheap pre-filter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from amprewrite.cli import main
from amprewrite.engine import rewrite_source
from amprewrite.options import Options
from tests.test_cli import TRAINING


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / ".git").mkdir()
    for relative in ("src/train.py", "src/pkg/step.py", "scripts/old.py", "gen/out.py"):
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(TRAINING)
    return tmp_path


def _config(project: Path, body: str) -> None:
    (project / "pyproject.toml").write_text(f"[tool.amprewrite]\n{body}\n")


def test_config_is_found_by_walking_up_and_applies(project: Path) -> None:
    _config(project, 'opt-level = "O2"')
    assert _run(str(project / "src" / "train.py"))[0] == 1
    assert 'GradScaler("O2")' in (project / "src" / "train.py").read_text()


def test_the_command_line_wins_over_the_config(project: Path) -> None:
    _config(project, 'opt-level = "O2"')
    _run("--opt-level", "O1", str(project / "src" / "train.py"))
    assert "GradScaler()" in (project / "src" / "train.py").read_text()


def test_an_unknown_key_is_an_error_naming_it(project: Path) -> None:
    _config(project, 'opt_levle = "O2"')
    code, _, err = _run(str(project / "src"))
    assert code == 2 and "unknown key 'opt_levle'" in err


def test_config_excludes_and_gitignore_leave_files_out(project: Path) -> None:
    _config(project, 'exclude = "/scripts/"')
    (project / ".gitignore").write_text("gen/\n")
    _, _, err = _run("--check", "-v", str(project))
    statuses = [line.split(":")[0] for line in err.splitlines()
                if line.endswith(": would be rewritten")]
    assert statuses == [str(project / "src/pkg/step.py"), str(project / "src/train.py")]


def test_extend_exclude_adds_to_exclude(project: Path) -> None:
    _, _, err = _run("--check", "-v", "--exclude", "/scripts/", "--extend-exclude", "/pkg/",
                     str(project))
    statuses = [line.split(":")[0] for line in err.splitlines()
                if line.endswith(": would be rewritten")]
    assert statuses == [str(project / "gen/out.py"), str(project / "src/train.py")]


def test_select_and_ignore_filter_findings_by_prefix(project: Path) -> None:
    train = str(project / "src" / "train.py")
    _, _, err = _run("--check", "--select", "AMP10", "--ignore", "AMP101", train)
    codes = {line.split(" ")[1] for line in err.splitlines() if ": AMP" in line}
    assert codes == {"AMP100", "AMP102", "AMP104", "AMP105"}


def test_an_inline_comment_withholds_its_edit_and_what_depends_on_it(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_bytes(TRAINING.replace(b"    optimizer.step()\n",
                                      b"    optimizer.step()  # amprewrite: ignore[AMP104]\n"))
    code, _, err = _run("--check", str(path))
    assert code == 0 and ": AMP104 " not in err
    assert "AMP012 edits withheld: once AMP104 is ignored at `optimizer.step()`" in err


def test_parallel_jobs_give_the_same_sorted_report(project: Path) -> None:
    one = _run("--check", "-v", "--jobs", "1", str(project))
    two = _run("--check", "-v", "--jobs", "2", str(project))
    assert one == two
    assert one[2].count("would be rewritten") == 5  # four files and the summary line


def test_json_output(project: Path) -> None:
    code, out, _ = _run("--check", "--output-format", "json", str(project / "src"))
    document = json.loads(out)
    assert code == 1
    assert [f["status"] for f in document["files"]] == ["would be rewritten"] * 2
    assert {"code": "AMP102", "line": 13, "column": 5} in [
        {k: f[k] for k in ("code", "line", "column")} for f in document["files"][0]["findings"]]


def test_github_annotations(project: Path) -> None:
    _, out, _ = _run("--check", "--output-format", "github", str(project / "src" / "train.py"))
    assert (f"::error file={project / 'src' / 'train.py'},line=13,col=5,endLine=13,endColumn=5,"
            "title=AMP102 backward pass scaled::") in out


def test_files_without_torch_are_skipped_before_parsing() -> None:
    result = rewrite_source(b"def broken(:\n", Options())  # not parsed, so no syntax error
    assert not result.changed and result.findings[0].code == "AMP001"


AMP_WITH_BACKWARD_INSIDE = b"""import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
for x, y in batches:
    with torch.autocast("cuda"):
        loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""


def test_check_fails_on_an_amp_mistake_it_cannot_fix(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_bytes(AMP_WITH_BACKWARD_INSIDE)
    code, _, err = _run("--check", str(path))
    assert code == 1 and "AMP604 backward runs inside an autocast region" in err
    assert _run(str(path))[0] == 0  # a normal run rewrote nothing: 0, the finding still shown
    assert path.read_bytes() == AMP_WITH_BACKWARD_INSIDE


def test_an_ignore_comment_accepts_a_mistake(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_bytes(AMP_WITH_BACKWARD_INSIDE.replace(
        b"scaler.scale(loss).backward()\n",
        b"scaler.scale(loss).backward()  # amprewrite: ignore[AMP604]\n"))
    assert _run("--check", str(path))[0] == 0
