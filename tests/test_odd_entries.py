"""One odd entry in a walked tree costs that entry only, with a finding: every other file is
still processed (the issue "Reliability at the edges", first item)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from amprewrite.cli import main
from amprewrite.discovery import find_targets, walk
from amprewrite.project import rewrite
from amprewrite.project.layout import ModuleFinder
from amprewrite.project.outline import outline
from tests.test_cli import TRAINING

FIXTURES = Path(__file__).parent.parent / "fixtures" / "projects"


def _check(*paths: Path) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["--check", *map(str, paths)])
    return result.exit_code, result.output


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A directory whose `train.py` would be rewritten."""
    (tmp_path / "train.py").write_bytes(TRAINING)
    return tmp_path


def test_a_dangling_gitignore_symlink_is_reported_and_the_rest_processed(tree: Path) -> None:
    (tree / ".gitignore").symlink_to(tree / "nowhere")
    code, output = _check(tree)
    assert code == 123, output
    assert ".gitignore:1:1: AMP004 cannot read: no such file or directory" in output
    assert "train.py" in output and "1 file would be rewritten" in output


@pytest.mark.parametrize("line", ["[z-a]", "!", "a\\"])
def test_a_gitignore_line_git_ignores_is_ignored_with_a_finding(tree: Path, line: str) -> None:
    (tree / "ignored.py").write_bytes(TRAINING)
    (tree / ".gitignore").write_text(f"ignored.py\n{line}\n")
    code, output = _check(tree)
    assert code == 1, output
    assert f".gitignore:2:1: AMP006 `{line}` is not a valid pattern" in output
    assert "ignored.py" not in output  # the file's other lines still apply
    assert "1 file would be rewritten" in output


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="[]!\\*?/-az# ", max_size=6), max_size=4))
def test_no_gitignore_line_fails_the_walk(lines: list[str]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        top = Path(directory)
        (top / "train.py").write_bytes(TRAINING)
        (top / ".gitignore").write_text("\n".join(lines), encoding="utf-8")
        found = find_targets([top])
    assert all(problem.path.name == ".gitignore" for problem in found.problems)


def test_a_symlink_loop_costs_its_entries_only(tree: Path) -> None:
    (tree / "a.py").symlink_to("b.py")
    (tree / "b.py").symlink_to("a.py")
    code, output = _check(tree)
    assert code == 123, output
    assert re.search(r"a\.py:1:1: AMP004 cannot read: too many levels of symbolic links", output)
    assert "b.py:1:1: AMP004" in output and "1 file would be rewritten" in output
    code, output = _check(tree / "a.py", tree / "train.py")  # named: the loop is missing
    assert code == 2 and "no such file or directory" in output


def test_a_fifo_named_gitignore_is_never_opened(tree: Path) -> None:
    os.mkfifo(tree / ".gitignore")
    os.mkfifo(tree / "pipe.py")
    result = subprocess.run([sys.executable, "-m", "amprewrite", "--check", str(tree)],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 123, result.stderr
    assert ".gitignore:1:1: AMP004 cannot read: not a regular file" in result.stderr
    assert "pipe.py:1:1: AMP004 cannot read: not a regular file" in result.stderr
    assert "1 file would be rewritten" in result.stderr


@pytest.fixture
def shallow_recursion_limit() -> Iterator[int]:
    """A recursion limit of 200 (so that a tree deeper than it stays small enough for
    pytest's own recursive clean-up)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)
    yield 200
    sys.setrecursionlimit(limit)


def test_a_tree_deeper_than_the_recursion_limit_is_walked(
    tree: Path, shallow_recursion_limit: int
) -> None:
    deepest = tree
    for _ in range(shallow_recursion_limit + 50):
        deepest = deepest / "d"
        deepest.mkdir()  # not `os.makedirs`, which recurses
    (deepest / "deep.py").write_bytes(b"x = 1\n")
    assert [name for _, _, files in walk(tree) for name in files] == ["train.py", "deep.py"]
    assert len(find_targets([tree]).targets) == 2


def test_walk_lists_like_os_walk(tmp_path: Path) -> None:
    for name in ("b/c", "a/x", "a/y/z"):
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "f.py").touch()
    (tmp_path / "link").symlink_to(tmp_path / "a")
    expected = sorted((Path(r), sorted(d), sorted(f)) for r, d, f in os.walk(tmp_path))
    assert sorted(walk(tmp_path)) == expected


DEEP = 3000  # terms: the `ast` of `a + a + ... + a` is that deep


def test_a_module_nested_3000_deep_costs_that_file_only(tree: Path) -> None:
    (tree / "deep.py").write_bytes(TRAINING + b"x = " + b" + ".join([b"a.b"] * DEEP) + b"\n")
    assert outline(tree / "deep.py", (tree / "deep.py").read_bytes(), ModuleFinder(tree)) is None
    code, output = _check(tree)
    assert code == 123, output
    assert "deep.py:1:1: AMP004 source too deeply nested" in output
    assert "1 file would be rewritten" in output


def test_a_crash_while_linking_a_project_costs_its_group_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(FIXTURES / "engine_function" / "input", tmp_path / "project")
    (tmp_path / "alone.py").write_bytes(TRAINING)

    def too_deep(*args: object) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(rewrite, "link_group", too_deep)
    code, output = _check(tmp_path)
    assert code == 123, output
    assert "engine.py:1:1: AMP004 source too deeply nested to rewrite" in output
    assert "alone.py" in output and "1 file would be rewritten" in output


def test_a_symlink_leading_outside_the_named_directory_is_skipped(tmp_path: Path) -> None:
    named, outside = tmp_path / "named", tmp_path / "outside"
    named.mkdir()
    outside.mkdir()
    (outside / "real.py").write_bytes(TRAINING)
    (named / "own.py").write_bytes(TRAINING)
    (named / "link.py").symlink_to(outside / "real.py")
    (named / "inner.py").symlink_to("own.py")  # inside: followed, once
    found = find_targets([named])
    assert [t.path.name for t in found.targets] == ["inner.py"]  # not widening the project
    result = CliRunner().invoke(main, [str(named)])
    assert result.exit_code == 1, result.output
    assert f"link.py:1:1: AMP007 symlink to {outside / 'real.py'}, outside {named}: skipped" in (
        result.output)
    assert (outside / "real.py").read_bytes() == TRAINING
    assert (named / "own.py").read_bytes() != TRAINING
    result = CliRunner().invoke(main, [str(named / "link.py")])  # named itself: followed
    assert result.exit_code == 1 and (outside / "real.py").read_bytes() != TRAINING


def test_a_gitignore_pattern_python_warns_about_prints_no_warning(tree: Path) -> None:
    """`[[a]b` compiles to a regex `re` warns about (FutureWarning: nested set): the pattern
    is the user's, and still applies."""
    (tree / ".gitignore").write_text("[[a]b\nskipped.py\n", encoding="utf-8")
    (tree / "skipped.py").write_bytes(TRAINING)
    result = subprocess.run([sys.executable, "-W", "always", "-m", "amprewrite", "--check",
                             str(tree)], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    assert "skipped.py" not in result.stdout + result.stderr
