"""CI (`.ci/run`) runs exactly the README's full test command, after the linter and the type
checker; the default tier's representative executions exist."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import FAST_EXECUTIONS

ROOT = Path(__file__).resolve().parent.parent
FULL_SUITE = 'pytest -q -m "slow or not slow" -n 2 --dist loadfile'


def test_ci_runs_the_readme_full_test_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"```bash\n{FULL_SUITE}\n```" in readme
    commands = [line for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
                if line and not line.startswith(("#", "echo"))]
    assert commands[-1] == FULL_SUITE
    assert commands.index("ruff check .") < commands.index("mypy") < len(commands) - 1


def test_the_fast_executions_name_tests_that_exist() -> None:
    """A renamed execution test would drop out of the default tier without a word."""
    for node_id in FAST_EXECUTIONS:
        path, _, test = node_id.partition("::")
        assert f"def {test.partition('[')[0]}(" in (ROOT / path).read_text(encoding="utf-8")
