"""Selecting and suppressing steer the change (issue 39): an ignored code's edit is not made,
what depends on it is withheld with AMP012, and the output never holds an edit the full
rewrite would not make. The properties run over the fixture pairs (a sample in the default
tier, every fixture in the slow one), each code and each comment form in turn."""

from __future__ import annotations

import ast
import difflib
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from amprewrite.catalog import CHANGE, LINT
from amprewrite.engine import RewriteResult, rewrite_source
from amprewrite.line_fitting import line_joiner
from amprewrite.options import Options
from amprewrite.suppressions import line_codes, wanted
from tests.fixture_cases import FIXTURES

O1_INPUTS = sorted(p / "input.py" for p in FIXTURES.iterdir() if (p / "input.py").exists())
SAMPLE = O1_INPUTS[::9]
_STEERED = (CHANGE, LINT)


def _fixtures(every: list[Path]) -> list[pytest.param]:
    sampled = set(SAMPLE)
    return [pytest.param(p, id=p.parent.name, marks=() if p in sampled else pytest.mark.slow)
            for p in every]


def _changes(result: RewriteResult) -> list[tuple[str, int]]:
    return [(f.code, f.line) for f in result.findings if f.severity in _STEERED
            and "(not made:" not in f.message]


def _added(before: bytes, after: bytes) -> Counter[str]:
    """The lines `after` adds to `before`, stripped; imports left out (their names are cut
    to what the output uses) and backwards (a loss the region would have hoisted into a
    variable is scaled where it stands once the region is withheld); casts to float32 taken
    out (a line may keep one of the full rewrite's two, a no-op without its region)."""
    joined = line_joiner("", sys.maxsize)  # a statement is compared on one line, however
    # the rewrite wrapped it (a line one run moves into autocast is wrapped, the other's not)
    lines = difflib.ndiff(joined(before.decode()).splitlines(),
                          joined(after.decode()).splitlines())
    return Counter(line[2:].strip().replace(".float()", "") for line in lines
                   if line.startswith("+ ") and ".backward(" not in line
                   and not line[2:].lstrip().startswith(("import ", "from ")))


@pytest.mark.parametrize("path", _fixtures(O1_INPUTS))
def test_an_ignored_code_makes_none_of_its_edits_and_nothing_new(path: Path) -> None:
    source = path.read_bytes()
    full = rewrite_source(source, Options())
    made = _changes(full)
    for code in sorted({code for code, _ in made}):
        result = rewrite_source(source, Options(ignore=(code,)))
        shown = [f for f in result.findings if wanted(f.code, (), (code,))]
        assert code not in {f.code for f in shown}, code
        assert set(_changes(result)) <= set(made), code
        ast.parse(result.source)
        extra = _added(source, result.source) - _added(source, full.source)
        assert not extra, (code, extra)
        for finding in shown:
            if finding.code == "AMP012":
                assert f"once {code} is ignored" in finding.message, finding


def _commented(source: bytes, line: int, comment: str) -> bytes | None:
    """`source` with `comment` ending `line`, where that leaves its program as it was."""
    lines = source.split(b"\n")
    if lines[line - 1].rstrip().endswith(b"\\") or b"#" in lines[line - 1]:
        return None
    lines[line - 1] = lines[line - 1].rstrip() + b"  " + comment
    commented = b"\n".join(lines)
    try:
        same = ast.dump(ast.parse(commented)) == ast.dump(ast.parse(source))
    except SyntaxError:
        return None
    return commented if same and line_codes(commented) else None


@pytest.mark.parametrize("path", _fixtures(O1_INPUTS))
def test_a_comment_at_a_line_withholds_what_ignoring_its_code_does(path: Path) -> None:
    """Where a code is reported at one line only, a comment there and `--ignore` of the code
    withhold the same edits: the outputs differ by the comment (and the layout) only."""
    source = path.read_bytes()
    made = _changes(rewrite_source(source, Options()))
    once = Counter(code for code, _ in made)
    for index, (code, line) in enumerate(made):
        form = f"# noqa: E501, {code}" if index % 2 else f"# amprewrite: ignore[{code}]"
        commented = _commented(source, line, form.encode())
        if once[code] != 1 or commented is None:
            continue
        ignored = rewrite_source(source, Options(ignore=(code,))).source
        result = rewrite_source(commented, Options()).source
        uncommented = result.replace(b"  " + form.encode(), b"")
        # the comment lengthens its line, which may set the file's line limit: the two may
        # be laid out apart (`line_fitting`), and are the same program
        assert uncommented == ignored or ast.dump(ast.parse(uncommented)) == ast.dump(
            ast.parse(ignored)), (code, line)


TRAINING = b"""\
import torch
import torch.nn as nn

model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
    optimizer.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
"""


@pytest.mark.parametrize(("comment", "withheld"), [
    (b"  # noqa: AMP101", True), (b"  # NOQA:AMP101,E501", True), (b"  # noqa", False),
    (b"  # noqa: E501", False), (b"  # amprewrite: ignore", True),
    (b"  # amprewrite: ignore[AMP102]", False),
])
def test_which_comments_withhold_an_edit(comment: bytes, withheld: bool) -> None:
    source = TRAINING.replace(b"model(x), y)", b"model(x), y)" + comment)
    result = rewrite_source(source, Options()).source
    assert ("autocast" not in result.decode()) is withheld
    assert b"scaler.scale(loss).backward()" in result


def test_ignoring_the_scaled_backward_leaves_no_routed_step_behind() -> None:
    result = rewrite_source(TRAINING, Options(ignore=("AMP102",)))
    assert result.source == TRAINING and result.withheld is not None
    rejection = next(f for f in result.findings if f.code == "AMP012")
    assert rejection.line == 11 and "once AMP102 is ignored at `loss.backward()`" in (
        rejection.message)


def test_select_keeps_only_the_selected_codes_edits() -> None:
    result = rewrite_source(TRAINING, Options(select=("AMP10",), ignore=("AMP101",))).source
    assert b"scaler.step(optimizer)" in result and b"autocast" not in result
    assert b"from amprewrite_runtime import GradScaler\n" in result  # autocast not imported


def test_a_lint_fix_whose_code_is_ignored_is_not_applied() -> None:
    source = (FIXTURES / "lint_checkpoint_restore" / "input.py").read_bytes()
    assert rewrite_source(source, Options()).source != source
    assert rewrite_source(source, Options(ignore=("AMP605",))).source == source


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "amprewrite", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_per_file_ignores_keep_a_file_fp32(tmp_path: Path) -> None:
    (tmp_path / "legacy").mkdir()
    for name in ("train.py", "legacy/old.py", "eval_train.py"):
        (tmp_path / name).write_bytes(TRAINING)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.amprewrite.per-file-ignores]\n"legacy/*.py" = ["AMP"]\n'
        '"eval_*.py" = ["AMP101"]\n')
    done = _cli(".", "-q", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert (tmp_path / "legacy" / "old.py").read_bytes() == TRAINING
    assert "old.py" not in done.stderr
    assert b"autocast" in (tmp_path / "train.py").read_bytes()
    evaluated = (tmp_path / "eval_train.py").read_bytes()  # a name pattern matches anywhere
    assert b"scaler.step(optimizer)" in evaluated and b"autocast" not in evaluated


def test_an_unknown_code_in_per_file_ignores_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_bytes(TRAINING)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.amprewrite.per-file-ignores]\n"*.py" = ["AMP9999"]\n')
    done = _cli("--check", "train.py", cwd=tmp_path)
    assert done.returncode == 2 and "per-file-ignores '*.py'" in done.stderr


def test_a_withheld_edit_in_one_linked_file_leaves_the_group_unchanged(tmp_path: Path) -> None:
    project = tmp_path / "p"
    shutil.copytree(FIXTURES / "projects" / "engine_function" / "input", project)
    before = {p: p.read_bytes() for p in project.rglob("*.py")}
    (project / "pyproject.toml").write_text(
        '[tool.amprewrite.per-file-ignores]\n"main.py" = ["AMP100"]\n')
    done = _cli(".", cwd=project)
    assert {p: p.read_bytes() for p in project.rglob("*.py")} == before
    assert "engine.py:1:1: AMP012 edits withheld: once AMP100 is ignored" in done.stderr
    assert "main.py:1:1: AMP012" in done.stderr
