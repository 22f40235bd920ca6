"""The hooks in .pre-commit-hooks.yaml, run for real by `pre-commit try-repo`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_cli import TRAINING

REPO = Path(__file__).resolve().parent.parent
PRE_COMMIT = [sys.executable, "-m", "pre_commit"]


@pytest.fixture(scope="module")
def user_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path_factory.mktemp("user-repo")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return repo


def _try(repo: Path, hook: str, home: Path) -> subprocess.CompletedProcess[str]:
    (repo / "train.py").write_bytes(TRAINING)
    subprocess.run(["git", "add", "train.py"], cwd=repo, check=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "PRE_COMMIT_HOME": str(home / "cache"),
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run([*PRE_COMMIT, "try-repo", str(REPO), hook, "--files", "train.py"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=600,
                          check=False)


@pytest.mark.slow
def test_check_hook_fails_and_writes_nothing(user_repo: Path, tmp_path: Path) -> None:
    result = _try(user_repo, "amprewrite-check", tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "AMP102" in result.stdout
    assert (user_repo / "train.py").read_bytes() == TRAINING


@pytest.mark.slow
def test_rewrite_hook_rewrites_the_file(user_repo: Path, tmp_path: Path) -> None:
    result = _try(user_repo, "amprewrite", tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr  # files were modified
    assert b"scaler.scale(loss).backward()" in (user_repo / "train.py").read_bytes()
