"""Every fixture pair: exact output, exact findings, idempotency, and output that compiles."""

from __future__ import annotations

import pytest

from amprewrite.engine import rewrite_source
from tests.fixture_cases import Case, cases

CASES = cases()


def _rewrite(case: Case) -> tuple[bytes, str]:
    result = rewrite_source(case.input.read_bytes(), case.options)
    findings = "".join(f.format("input.py") + "\n" for f in result.findings)
    return result.source, findings


@pytest.mark.parametrize("case", CASES, ids=str)
def test_output_matches_expected(case: Case, request: pytest.FixtureRequest) -> None:
    output, findings = _rewrite(case)
    original = case.input.read_bytes()
    if request.config.getoption("--update-fixtures"):
        if output != original:
            case.expected.write_bytes(output)
        elif case.expected.exists():
            case.expected.unlink()
        case.findings.write_text(findings)
    expected = case.expected.read_bytes() if case.expected.exists() else original
    assert output.decode() == expected.decode()
    assert findings == case.findings.read_text()


@pytest.mark.parametrize("case", CASES, ids=str)
def test_second_run_changes_nothing(case: Case) -> None:
    once, _ = _rewrite(case)
    twice = rewrite_source(once, case.options)
    assert not twice.changed
    assert twice.source == once


@pytest.mark.parametrize("case", CASES, ids=str)
def test_output_compiles(case: Case) -> None:
    output, _ = _rewrite(case)
    compile(output, str(case.expected), "exec")


def test_there_are_enough_fixture_pairs() -> None:
    changed = {c.name for c in CASES if c.expected.exists()}
    assert len(changed) >= 8, changed
