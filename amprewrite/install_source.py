"""How to install amprewrite with its runtime from where this copy came from.

amprewrite is not on a package index: the command that installs `amprewrite_runtime` (in the
same distribution; the `runtime` extra adds torch) names what this copy was installed from, as
pip recorded it (PEP 610 `direct_url.json`): a clone (`pip install '.[runtime]'`), a
repository URL at its commit, or a built wheel.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse


def install_command(extra: str = "runtime", cwd: Path | None = None) -> str:
    """`pip install '<this copy's source>[extra]'`; a path under `cwd` relative to it."""
    return f"pip install {shlex.quote(requirement(_direct_url(), cwd or Path.cwd(), extra))}"


def requirement(direct_url: dict[str, Any] | None, cwd: Path, extra: str) -> str:
    """The requirement that installs this copy's source with `extra`."""
    if direct_url is None:
        root = _source_tree()
        return _local(root, cwd, extra) if root is not None else f"amprewrite[{extra}]"
    url = direct_url["url"]
    vcs = direct_url.get("vcs_info")
    if vcs is not None:
        return f"amprewrite[{extra}] @ {vcs['vcs']}+{url}@{vcs['commit_id']}"
    if url.startswith("file:"):
        path = Path(unquote(urlparse(url).path))
        clone = _pre_commit_clone(path)
        if clone is not None:  # pre-commit's private cache: name the repository it cloned
            return f"amprewrite[{extra}] @ git+{clone[0]}@{clone[1]}"
        return _local(path, cwd, extra)
    return f"amprewrite[{extra}] @ {url}"


def _pre_commit_clone(path: Path) -> tuple[str, str] | None:
    """The repository URL and commit of a pre-commit hook's clone (`~/.cache/pre-commit/
    repoXXXX`, or under `$PRE_COMMIT_HOME`), read from its git files; None for any other
    directory."""
    home = os.environ.get("PRE_COMMIT_HOME")
    cache = path.parent
    if not (cache.name == "pre-commit" or (home and cache == Path(home))):
        return None
    git = path / ".git"
    try:
        config = (git / "config").read_text(encoding="utf-8")
        head = (git / "HEAD").read_text(encoding="utf-8").strip()
        if head.startswith("ref: "):
            head = (git / head[5:]).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    origin = re.search(r'\[remote "origin"\][^\[]*?^\s*url\s*=\s*(\S+)', config, re.M)
    if origin is None or not re.fullmatch(r"[0-9a-f]{40}", head):
        return None
    url = origin[1]
    return (f"file://{url}" if url.startswith("/") else url), head


def _local(path: Path, cwd: Path, extra: str) -> str:
    """A directory or wheel with the extra: `.[runtime]`, `./dist/x.whl[runtime]`."""
    try:
        shown = path.relative_to(cwd).as_posix()
        shown = "." if shown == "." else f"./{shown}"
    except ValueError:
        shown = str(path)
    return f"{shown}[{extra}]"


def _direct_url() -> dict[str, Any] | None:
    """What pip recorded about where amprewrite was installed from, if it did."""
    from importlib.metadata import distributions  # only when a rewrite needs the hint

    for distribution in distributions(name="amprewrite"):
        text = distribution.read_text("direct_url.json")
        if text:
            return json.loads(text)
    return None


def _source_tree() -> Path | None:
    """The clone this module runs from (its pyproject.toml names amprewrite), if it does."""
    root = Path(__file__).resolve().parent.parent
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and 'name = "amprewrite"' in pyproject.read_text(encoding="utf-8"):
        return root
    return None

