"""The hooks in .pre-commit-hooks.yaml, run for real by `pre-commit try-repo`, and the
README's configuration run as documented (autoupdate --freeze, then a commit's hooks)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from amprewrite import __version__
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


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True,
                          env=_ENV | {"HOME": str(cwd)})
    return done.stdout.strip()


_ENV = {"PATH": "/usr/bin:/bin", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def _readme_configuration() -> str:
    """The `.pre-commit-config.yaml` shown in README.md, exactly."""
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Keep it right: pre-commit"):]
    block = re.search(r"```yaml\n(.*?)```", section, re.DOTALL)
    assert block is not None, "README.md shows no .pre-commit-config.yaml"
    return block[1]


def _upstream(directory: Path) -> Path:
    """This working tree as a repository with a `main` branch, as users clone it."""
    files = _git(REPO, "ls-files", "-co", "--exclude-standard").splitlines()
    for name in files:
        if (REPO / name).is_file():
            (directory / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, directory / name)
    _git(directory, "init", "-q", "-b", "main")
    _git(directory, "add", "-A")
    _git(directory, "commit", "-qm", "upstream")
    return directory


@pytest.mark.slow
def test_the_readme_configuration_works_as_documented(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    upstream = _upstream(tmp_path / "upstream")
    _git(upstream, "tag", f"v{__version__}")  # as the release is tagged (CHANGELOG.md)
    configuration = _readme_configuration()
    assert configuration.count("<this repository's URL>") == 1
    user = tmp_path / "user"
    user.mkdir()
    _git(user, "init", "-q")
    (user / ".pre-commit-config.yaml").write_text(
        configuration.replace("<this repository's URL>", str(upstream)))
    (user / "pyproject.toml").write_text('[tool.amprewrite]\nexclude = "/legacy/"\n')
    (user / "legacy").mkdir()
    for name, source in [("train.py", TRAINING), ("legacy/old.py", TRAINING),
                         ("util.py", b"def add(a, b):\n    return a + b\n")]:
        (user / name).write_bytes(source)
    _git(user, "add", "-A")
    env = _ENV | {"HOME": str(tmp_path), "PRE_COMMIT_HOME": str(tmp_path / "cache")}

    def pre_commit(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*PRE_COMMIT, *args], cwd=user, env=env, capture_output=True,
                              text=True, timeout=600, check=False)

    pinned = pre_commit("autoupdate", "--freeze")
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    head = _git(upstream, "rev-parse", "HEAD")
    assert f"rev: {head}  # frozen: v{__version__}" in (
        user / ".pre-commit-config.yaml").read_text()

    _git(user, "add", ".pre-commit-config.yaml")
    result = pre_commit("run")  # the staged files, as on `git commit`
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "train.py:13:5: AMP102 `.backward()` of `loss` would be scaled" in output
    assert "to apply these changes: amprewrite --opt-level O1 --force-exclude train.py\n" in output
    assert "legacy/old.py" not in output  # --force-exclude: the config's exclude applies
    assert "util.py" not in output and "AMP001" not in output  # nothing to do: silent
    assert "mutable reference" not in output
    assert (user / "train.py").read_bytes() == TRAINING
