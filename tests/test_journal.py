"""A project group killed between two renames (SIGKILL) is completed by the next run that
writes the project, from the journal the killed run left in the project root."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_projects import _copy, _run, _tree

_KILLED_AFTER_FIRST_RENAME = """
import os, signal, sys
from amprewrite import fileio
from amprewrite.cli import main

real_commit = fileio.Staged.commit

def commit(self, expected=None):
    real_commit(self, expected)
    os.kill(os.getpid(), signal.SIGKILL)  # between the group's two renames

fileio.Staged.commit = commit
main(["."])
"""


@pytest.fixture
def killed(tmp_path: Path) -> tuple[Path, dict[str, bytes], dict[str, bytes]]:
    """A project whose rewrite was killed after its first rename; the tree before, and the
    tree a whole rewrite gives."""
    whole = _copy("trainer_receives_optimizer", tmp_path / "whole")
    assert _run(whole, ".")[0] == 1
    work = _copy("trainer_receives_optimizer", tmp_path)
    before = _tree(work)
    result = subprocess.run([sys.executable, "-c", _KILLED_AFTER_FIRST_RENAME], cwd=work,
                            capture_output=True, text=True, check=False)
    assert result.returncode == -9, result.stderr
    return work, before, _tree(whole)


def test_the_next_run_completes_a_group_killed_between_two_renames(
    killed: tuple[Path, dict[str, bytes], dict[str, bytes]],
) -> None:
    work, before, whole = killed
    left = _tree(work)
    assert left["train.py"] == whole["train.py"] and left["trainer.py"] == before["trainer.py"]
    [journal] = [name for name in left if name.startswith(".amprewrite-journal-")]
    code, output = _run(work, ".")
    assert f"{journal}:1:1: AMP010 interrupted rewrite completed: trainer.py" in output
    assert code == 0, output  # the group is whole: nothing else to change
    assert _tree(work) == whole


def test_a_file_changed_since_is_not_completed(
    killed: tuple[Path, dict[str, bytes], dict[str, bytes]],
) -> None:
    work, _, whole = killed
    (work / "trainer.py").write_bytes(b"# edited by hand\n")
    _run(work, "--check", ".")  # --check writes nothing, the journal included
    assert any(name.startswith(".amprewrite-journal-") for name in _tree(work))
    _run(work, ".")
    after = _tree(work)
    assert after["trainer.py"] == b"# edited by hand\n"
    assert after["train.py"] == whole["train.py"]
    assert not [name for name in after if name.startswith(".")]  # journal and staged file gone


def test_a_torn_journal_is_dropped(tmp_path: Path) -> None:
    work = _copy("trainer_receives_optimizer", tmp_path)
    (work / ".amprewrite-journal-0123456789abcdef.json").write_bytes(b'[{"target": "tr')
    code, output = _run(work, ".")
    assert code == 1, output
    assert "AMP010" not in output
    assert not [name for name in _tree(work) if name.startswith(".")]
