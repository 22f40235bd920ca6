"""Installable as the README says: one version everywhere (pyproject, package, --version,
CHANGELOG, the tag), a distribution that holds the runtime, and install commands that name
where this copy came from (issue 26)."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from amprewrite import __version__
from amprewrite.install_source import install_command, requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_one_version_in_pyproject_package_version_option_and_changelog() -> None:
    assert PYPROJECT["project"]["version"] == __version__
    done = subprocess.run([sys.executable, "-m", "amprewrite", "--version"], capture_output=True,
                          text=True, check=True, cwd=ROOT)
    assert done.stdout == f"amprewrite {__version__}\n"
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", changelog, re.M)
    assert releases and releases[0] == __version__, "add the release to CHANGELOG.md"
    assert f"@v{__version__}'" in (ROOT / "README.md").read_text(encoding="utf-8")


def _packages_on_disk() -> dict[str, Path]:
    found = {}
    for top, directory in (("amprewrite", ROOT / "amprewrite"),
                           ("amprewrite_runtime", ROOT / "runtime" / "amprewrite_runtime")):
        for init in directory.rglob("__init__.py"):
            parts = init.parent.relative_to(directory).parts
            found[".".join((top, *parts))] = init.parent
    return found


def test_the_distribution_lists_every_package_the_runtime_included() -> None:
    setuptools = PYPROJECT["tool"]["setuptools"]
    assert sorted(setuptools["packages"]) == sorted(_packages_on_disk())
    assert setuptools["package-dir"]["amprewrite_runtime"] == "runtime/amprewrite_runtime"
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert [r for r in extras["runtime"] if r.startswith("torch")]
    assert not [r for r in PYPROJECT["project"]["dependencies"] if r.startswith("torch")]


@pytest.mark.parametrize(("direct_url", "expected"), [
    ({"url": "file:///home/me/amprewrite", "dir_info": {"editable": True}}, ".[runtime]"),
    ({"url": "file:///home/me/amprewrite", "dir_info": {}}, ".[runtime]"),
    ({"url": "file:///home/me/amprewrite/dist/amprewrite-0.1.0-py3-none-any.whl",
      "archive_info": {}}, "./dist/amprewrite-0.1.0-py3-none-any.whl[runtime]"),
    ({"url": "file:///opt/src/amprewrite", "dir_info": {}}, "/opt/src/amprewrite[runtime]"),
    ({"url": "https://example.org/amprewrite.git", "vcs_info": {
        "vcs": "git", "commit_id": "0123abc", "requested_revision": "v0.1.0"}},
     "amprewrite[runtime] @ git+https://example.org/amprewrite.git@0123abc"),
    ({"url": "https://example.org/amprewrite-0.1.0-py3-none-any.whl", "archive_info": {}},
     "amprewrite[runtime] @ https://example.org/amprewrite-0.1.0-py3-none-any.whl"),
])
def test_the_runtime_requirement_names_where_amprewrite_came_from(
    direct_url: dict, expected: str
) -> None:
    assert requirement(direct_url, Path("/home/me/amprewrite"), "runtime") == expected


def test_under_a_pre_commit_hook_the_requirement_names_the_hooks_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pre-commit installs the hook from its private clone (`~/.cache/pre-commit/repoXXXX`):
    the runtime is installed from the repository and commit that clone holds, not from it."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    for cache in (tmp_path / ".cache" / "pre-commit", tmp_path / "elsewhere"):
        clone = cache / "repoab12cd"
        (clone / ".git").mkdir(parents=True)
        (clone / ".git" / "config").write_text(
            '[core]\n\tbare = false\n[remote "origin"]\n\turl = https://example.org/a.git\n'
            '\tfetch = +refs/heads/*:refs/remotes/origin/*\n')
        (clone / ".git" / "HEAD").write_text(commit + "\n")
    monkeypatch.setenv("PRE_COMMIT_HOME", str(tmp_path / "elsewhere"))
    for cache in ("elsewhere", ".cache/pre-commit"):
        url = {"url": f"file://{tmp_path}/{cache}/repoab12cd", "dir_info": {}}
        assert requirement(url, tmp_path, "runtime") == (
            f"amprewrite[runtime] @ git+https://example.org/a.git@{commit}")
    monkeypatch.delenv("PRE_COMMIT_HOME")
    url = {"url": f"file://{tmp_path}/elsewhere/repoab12cd", "dir_info": {}}
    assert requirement(url, tmp_path, "runtime") == "./elsewhere/repoab12cd[runtime]"


def test_a_clone_run_without_pip_records_installs_from_itself() -> None:
    """Run from its source tree (PYTHONPATH, no direct_url.json): the clone is the source."""
    assert requirement(None, ROOT, "runtime") == ".[runtime]"
    assert requirement(None, ROOT / "tests", "plot") == f"{ROOT}[plot]"


def test_the_install_command_quotes_the_requirement_for_the_shell() -> None:
    command = install_command(cwd=ROOT)
    assert command.startswith("pip install '") and command.endswith("[runtime]'")


@pytest.mark.slow
def test_the_built_wheel_holds_the_codemod_the_runtime_and_the_extra(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                    "-q", "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True)
    [wheel] = tmp_path.glob(f"amprewrite-{__version__}-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(f"amprewrite-{__version__}.dist-info/METADATA").decode()
    for package, directory in _packages_on_disk().items():
        for module in directory.glob("*.py"):
            assert f"{package.replace('.', '/')}/{module.name}" in names
    assert "Requires-Dist: torch>=2.4; extra == \"runtime\"" in metadata
    assert "Provides-Extra: runtime" in metadata and f"Version: {__version__}" in metadata


def test_the_readme_pins_the_hooks_to_the_release_tag() -> None:
    """pre-commit warns of a mutable `rev: main`; the README's configuration names the tag
    of this version (`v<version>`, tagged on main as CHANGELOG.md says)."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert f"    rev: v{__version__}  " in readme and "rev: main" not in readme
