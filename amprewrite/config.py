"""`[tool.amprewrite]` in pyproject.toml, found by walking up from the inputs (as black does).

The command line wins over the file. Keys use the command line's spelling (`opt-level`,
`extend-exclude`, ...); an unknown key is a configuration error (exit 2) naming the key.
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path
from typing import Any

from amprewrite.catalog import CODE_FIELD
from amprewrite.fileio import resolved
from amprewrite.options import DTYPES, OPT_LEVELS

KEYS = {
    "opt-level": str, "dtype": str, "plain": bool, "keep-batchnorm-fp32": bool,
    "master-weights": bool, "loss-scale": (str, int, float), "reproducible": bool, "seed": int,
    "include": str, "exclude": str, "extend-exclude": str, "force-exclude": bool,
    "select": list, "ignore": list, "unsafe-fixes": bool, "per-file-ignores": dict,
    "docs-url": str,
}


class ConfigError(Exception):
    """The configuration cannot be used; the message says why."""


def find_pyproject(inputs: list[Path]) -> Path | None:
    """The nearest pyproject.toml with a [tool.amprewrite] table above the inputs' common
    directory, not looking past the repository root (.git / .hg)."""
    for candidate in project_directories(inputs):
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file() and "amprewrite" in load_toml(pyproject).get("tool", {}):
            return pyproject
    return None


def project_directories(inputs: list[Path]) -> list[Path]:
    """The inputs' common directory and those above it, up to the repository root (.git /
    .hg) included: where a project's configuration files may be."""
    real = [resolved(p) for p in inputs] or [Path.cwd()]
    directory = Path(*_common_parts(real))
    if not directory.is_dir():
        directory = directory.parent
    found = []
    for candidate in (directory, *directory.parents):
        found.append(candidate)
        if (candidate / ".git").exists() or (candidate / ".hg").exists():
            break
    return found


def read_config(pyproject: Path) -> dict[str, Any]:
    """The [tool.amprewrite] table, keys as click parameter names (`opt_level`)."""
    table = load_toml(pyproject).get("tool", {}).get("amprewrite", {})
    settings: dict[str, Any] = {}
    for key, value in table.items():
        if key not in KEYS:
            raise ConfigError(f"unknown key {key!r} in [tool.amprewrite] of {pyproject}"
                              f"{_did_you_mean(key)}")
        problem = _value_problem(key, value)
        if problem is not None:
            raise ConfigError(f"{key} in [tool.amprewrite] of {pyproject}: {problem}")
        settings[key.replace("-", "_")] = str(value) if key == "loss-scale" else value
    return settings


_EXPECTED = {str: "a string", bool: "true or false", int: "an integer",
             list: "a list of strings", (str, int, float): '"dynamic" or a number',
             dict: "a table of lists of codes"}
_EXAMPLES = {"opt-level": '"O1"', "dtype": '"bfloat16"', "plain": "true",
             "keep-batchnorm-fp32": "true", "master-weights": "true", "loss-scale": '"dynamic"',
             "reproducible": "true", "seed": "0", "include": "'\\.py$'", "exclude": '"/legacy/"',
             "extend-exclude": '"/gen/"', "force-exclude": "true", "select": '["AMP1"]',
             "ignore": '["AMP106"]', "per-file-ignores": '{ "legacy/*.py" = ["AMP"] }',
             "docs-url": '"https://example.org/amprewrite/findings#{code}"'}
_CHOICES = {"opt-level": OPT_LEVELS, "dtype": DTYPES}
_PATTERNS = ("include", "exclude", "extend-exclude")


def _value_problem(key: str, value: object) -> str | None:
    """What is wrong with a key's value, with the expected type and an example; None if
    nothing."""
    expected = KEYS[key]
    wrong = (not isinstance(value, expected) or (expected is not bool and isinstance(value, bool))
             or (expected is list and not all(isinstance(item, str) for item in value))
             or (expected is dict and not all(
                 isinstance(codes, list) and all(isinstance(c, str) for c in codes)
                 for codes in value.values())))
    if wrong:
        return (f"expected {_EXPECTED[expected]}, got {_toml(value)}; "
                f"write e.g. {key} = {_EXAMPLES[key]}")
    choices = _CHOICES.get(key)
    if choices is not None and value not in choices:
        shown = ", ".join(f'"{choice}"' for choice in choices)
        return (f"expected one of {shown}, got {_toml(value)}; "
                f"write e.g. {key} = {_EXAMPLES[key]}")
    if key in _PATTERNS:
        try:
            re.compile(value)
        except re.error as exc:
            return (f"expected a regular expression, got {_toml(value)} ({exc}); "
                    f"write e.g. {key} = {_EXAMPLES[key]}")
    if key == "docs-url" and CODE_FIELD not in value:
        return (f"expected a URL template containing {CODE_FIELD} (where each finding's code "
                f"goes), got {_toml(value)}; write e.g. {key} = {_EXAMPLES[key]}")
    return None


def _toml(value: object) -> str:
    """A value as TOML spells it, with its kind: `"O2" (a string)`."""
    kind = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "a table"}.get(type(value), type(value).__name__)
    shown = str(value).lower() if isinstance(value, bool) else repr(value).replace("'", '"')
    return f"{shown} ({kind})"


def _did_you_mean(key: str) -> str:
    """`; did you mean 'opt-level'?` (underscores read as dashes), else the known keys."""
    close = difflib.get_close_matches(key.replace("_", "-").lower(), KEYS, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f" (known: {', '.join(sorted(KEYS))})"


def load_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):  # imported here: a run without a pyproject.toml starts faster
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        with path.open("rb") as stream:
            return tomllib.load(stream)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc


def _common_parts(paths: list[Path]) -> tuple[str, ...]:
    parts = paths[0].parts
    for path in paths[1:]:
        common = 0
        for left, right in zip(parts, path.parts, strict=False):
            if left != right:
                break
            common += 1
        parts = parts[:common]
    return parts
