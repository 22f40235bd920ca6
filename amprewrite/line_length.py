"""The line length a project's formatter or linter is set to, for the code the rewrite adds.

Found by walking up from the inputs (not past the repository root), nearest first: in each
directory `pyproject.toml` (`[tool.ruff] line-length`, then `[tool.black] line-length`),
`ruff.toml` / `.ruff.toml` (`line-length`), then `setup.cfg`, `tox.ini` or `.flake8`
(`[flake8] max-line-length`). Without one, the rewrite keeps each file's own style (its longest
line, at least PEP 8's 79 columns: `ModuleFacts.line_limit`).
"""

from __future__ import annotations

from pathlib import Path

from amprewrite.config import ConfigError, load_toml, project_directories


def configured_line_length(inputs: list[Path]) -> int | None:
    """The nearest configured line length above the inputs, or None."""
    for directory in project_directories(inputs):
        for finder in (_pyproject, _ruff_toml, _flake8):
            length = finder(directory)
            if length is not None:
                return length
    return None


def _pyproject(directory: Path) -> int | None:
    tools = _toml(directory / "pyproject.toml").get("tool", {})
    for tool in ("ruff", "black"):
        length = tools.get(tool, {}).get("line-length")
        if isinstance(length, int) and not isinstance(length, bool) and length > 0:
            return length
    return None


def _ruff_toml(directory: Path) -> int | None:
    for name in ("ruff.toml", ".ruff.toml"):
        length = _toml(directory / name).get("line-length")
        if isinstance(length, int) and not isinstance(length, bool) and length > 0:
            return length
    return None


def _flake8(directory: Path) -> int | None:
    for name in ("setup.cfg", "tox.ini", ".flake8"):
        path = directory / name
        if not path.is_file():
            continue
        import configparser  # a start-up cost only a project with such a file pays

        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read(path, encoding="utf-8")
            value = parser.get("flake8", "max-line-length", fallback=None) or parser.get(
                "flake8", "max_line_length", fallback=None)
        except (configparser.Error, UnicodeError):
            continue
        if value is not None and value.strip().isdigit() and int(value) > 0:
            return int(value)
    return None


def _toml(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return load_toml(path)
    except ConfigError:
        return {}  # a file its own tool would refuse: no line length from it
