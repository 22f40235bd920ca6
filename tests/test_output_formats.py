"""`--output-format github`: every severity maps to an annotation level, and each annotation
carries its span and its code's title, escaped as GitHub's toolkit escapes them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import amprewrite.engine  # noqa: F401  # declares every rule's code
from amprewrite.catalog import Severity, declared
from amprewrite.cli import main
from amprewrite.findings import Finding
from amprewrite.output_formats import github_level, print_github
from amprewrite.runner import FileOutcome, Status

_ANNOTATION = re.compile(r"::(error|warning|notice) file=(?P<file>[^,]*),line=(\d+),col=(\d+),"
                         r"endLine=(\d+),endColumn=(\d+),title=(?P<title>[^:]*)::(?P<message>.*)")


@pytest.mark.parametrize("severity", list(Severity))
@pytest.mark.parametrize("would", [True, False])
def test_every_severity_is_annotated(
    severity: Severity, would: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    code = next(c for c in declared().values() if c.severity is severity)
    finding = Finding(code, 12, 5, "50% of it, here: a, b")
    print_github([FileOutcome("src/a,b:c.py", Status.CHANGED, [finding])], would)
    annotation = _ANNOTATION.fullmatch(capsys.readouterr().out.strip())
    assert annotation is not None
    assert annotation.group(1) == github_level(severity, would)
    assert annotation.groups()[2:6] == ("12", "5", "12", "5")
    assert annotation["file"] == "src/a%2Cb%3Ac.py"
    assert annotation["title"].startswith(f"{code} ") and len(annotation["title"]) > 8
    assert annotation["message"] == "50%25 of it, here: a, b"


def test_what_fails_the_run_is_an_error() -> None:
    assert github_level(Severity.LINT, False) == "error"
    assert github_level(Severity.ERROR, False) == "error"
    assert github_level(Severity.CHANGE, True) == "error"  # --check, --diff: the run fails
    assert github_level(Severity.CHANGE, False) == "notice"  # made: the run succeeds
    assert github_level(Severity.SKIP, True) == "warning"
    assert github_level(Severity.NOTE, True) == "notice"


_OWN_AMP_PLAIN_STEP = """\
import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
for x in torch.randn(8, 2, 4):
    with torch.autocast("cuda"):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.step()
    optimizer.zero_grad()
"""


def test_a_lint_finding_fails_check_as_an_error_annotation(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(_OWN_AMP_PLAIN_STEP)
    result = CliRunner().invoke(main, ["--check", "--output-format", "github", str(script)])
    assert result.exit_code == 1, result.output  # it was 123: KeyError on the lint severity
    assert f"::error file={script},line=12,col=5,endLine=12,endColumn=5,title=AMP6" in (
        result.output)


_FP32_TRAINING = """\
import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.randn(8, 2, 4):
    optimizer.zero_grad()
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
"""


def test_sarif_is_a_2_1_log_with_a_rule_per_code_and_a_result_per_finding(
    tmp_path: Path
) -> None:
    script = tmp_path / "train.py"
    script.write_text(_OWN_AMP_PLAIN_STEP)
    result = CliRunner().invoke(main, ["--check", "--output-format", "sarif", str(script)])
    assert result.exit_code == 1, result.output
    log = json.loads(result.stdout)
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    [run] = log["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert run["tool"]["driver"]["name"] == "amprewrite" and rules
    for found in run["results"]:
        rule = rules[found["ruleIndex"]]
        assert rule["id"] == found["ruleId"] and rule["shortDescription"]["text"]
        assert rule["help"]["text"] and found["level"] in ("error", "warning", "note")
    lint = next(r for r in run["results"] if r["ruleId"] == "AMP601")
    assert lint["level"] == "error"
    location = lint["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == str(script)
    assert location["region"] == {"startLine": 12, "startColumn": 5}


def test_statistics_count_the_findings_of_each_code_most_frequent_first(
    tmp_path: Path
) -> None:
    script = tmp_path / "train.py"
    script.write_text(_FP32_TRAINING)
    counted = CliRunner().invoke(main, ["--check", "--statistics", str(script)])
    assert counted.exit_code == 1, counted.output
    listed = CliRunner().invoke(main, ["--check", "--output-format", "json", str(script)])
    codes = [f["code"] for f in json.loads(listed.stdout)["files"][0]["findings"]]
    rows = [line.split("\t") for line in counted.output.splitlines()]
    assert {code: int(count) for count, code, _ in rows} == {c: codes.count(c) for c in codes}
    assert [int(count) for count, _, _ in rows] == sorted(
        (int(count) for count, _, _ in rows), reverse=True)
    assert ["AMP102", "backward pass scaled"] in [row[1:] for row in rows]
    assert str(script) not in counted.output  # counts, not each finding


def test_the_output_file_holds_the_report_and_the_exit_status_stays(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(_FP32_TRAINING)
    report = tmp_path / "report.json"
    result = CliRunner().invoke(main, ["--check", "--output-format", "json", "-o", str(report),
                                       str(script)])
    assert result.exit_code == 1 and result.output == ""
    assert json.loads(report.read_text())["files"][0]["status"] == "would be rewritten"
    text = tmp_path / "report.txt"
    CliRunner().invoke(main, ["--check", "--output-file", str(text), str(script)])
    assert f"{script}:8:5: AMP102" in text.read_text() and "would be rewritten" in (
        text.read_text())


def _project(tmp_path: Path, table: str) -> Path:
    """A project with its own [tool.amprewrite] (and a .git, where the lookup stops)."""
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "src").mkdir()
    (project / "pyproject.toml").write_text(f"[tool.amprewrite]\n{table}\n")
    return project


def test_the_stdin_filename_finds_the_configuration_from_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _project(tmp_path, "plain = true")
    monkeypatch.chdir(tmp_path)  # elsewhere: the config is found from the name, not from here
    name = str(project / "src" / "train.py")
    result = CliRunner().invoke(main, ["--stdin-filename", name, "-"], input=_FP32_TRAINING)
    assert result.exit_code == 1, result.output
    assert "torch.amp.GradScaler" in result.stdout  # --plain, from the project's config
    assert "amprewrite_runtime" not in result.stdout


def test_force_exclude_passes_an_excluded_stdin_filename_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _project(tmp_path, 'extend-exclude = "/legacy/"\nforce-exclude = true')
    monkeypatch.chdir(tmp_path)
    (project / "legacy").mkdir()
    excluded = str(project / "legacy" / "train.py")
    kept = CliRunner().invoke(main, ["--stdin-filename", excluded, "-"], input=_FP32_TRAINING)
    assert kept.exit_code == 0, kept.output
    assert kept.stdout == _FP32_TRAINING  # as it was: a format-on-save changes nothing
    included = str(project / "src" / "train.py")
    rewritten = CliRunner().invoke(main, ["--stdin-filename", included, "-"],
                                   input=_FP32_TRAINING)
    assert rewritten.exit_code == 1 and "scaler.scale(loss).backward()" in rewritten.stdout
