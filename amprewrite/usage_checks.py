"""Settings that parse but mean nothing, refused (exit 2) with the fix, as ruff does: a code
that no finding has, an option that only applies with another one.

Each message names the setting as the user wrote it: the flag (`--seed`), or the key and the
file it came from (`seed in [tool.amprewrite] of pyproject.toml`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any


class UsageProblem(Exception):
    """A setting that makes no sense; the message says which, where and how to fix it."""


def check_settings(
    settings: Mapping[str, Any], given: Collection[str], from_config: Collection[str],
    config: Path | None,
) -> None:
    """Raise UsageProblem for the first meaningless setting. `given`: the settings the command
    line or the config set; `from_config`: those the config set."""

    def name(setting: str) -> str:
        key = setting.replace("_", "-")
        return f"{key} in [tool.amprewrite] of {config}" if setting in from_config else f"--{key}"

    if "seed" in given and not settings["reproducible"]:
        raise UsageProblem(
            f"{name('seed')} only applies with --reproducible, which seeds the run at its entry "
            "point: add --reproducible (reproducible = true in [tool.amprewrite]), or drop "
            "the seed")
    for setting in ("select", "ignore"):
        for prefix in code_prefixes(settings[setting]):
            problem = unknown_code(prefix)
            if problem is not None:
                raise UsageProblem(f"{name(setting)}: {problem}")
    for pattern, codes in settings.get("per_file_ignores", {}).items():
        for prefix in codes:
            problem = unknown_code(prefix)
            if problem is not None:
                raise UsageProblem(f"per-file-ignores {pattern!r} in [tool.amprewrite] of "
                                   f"{config}: {problem}")


def code_prefixes(value: str | None) -> tuple[str, ...]:
    """`--select AMP1,AMP201` -> ("AMP1", "AMP201")."""
    return tuple(c.strip() for c in (value or "").split(",") if c.strip())


def unknown_code(prefix: str) -> str | None:
    """Why no finding code starts with `prefix` and what to write instead; None if some does."""
    import difflib

    from amprewrite.code_index import codes  # imports every rule: only when codes are given

    known = codes()
    if any(code.startswith(prefix) for code in known):
        return None
    close = difflib.get_close_matches(prefix.upper(), known, n=1, cutoff=0.6)
    fix = f"did you mean {close[0]!r}?" if close else (
        "a code or a prefix of one, such as AMP1 for AMP100-AMP199")
    return (f"no finding code starts with {prefix!r}; {fix} (`amprewrite --explain CODE` "
            "describes a code, docs/findings.md lists them all)")
