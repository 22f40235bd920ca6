"""docs/findings.md lists exactly the codes of the registry, with their titles."""

from __future__ import annotations

import re
from pathlib import Path

from amprewrite.findings import CODES

DOC = Path(__file__).resolve().parent.parent / "docs" / "findings.md"


def test_every_code_is_documented_with_its_title() -> None:
    rows = {
        match.group(1): match.group(2)
        for match in re.finditer(r"^\| (AMP\d{3}) \| \w+ \| ([^|]+) \|", DOC.read_text(), re.M)
    }
    assert set(rows) == set(CODES)
    for code, entry in CODES.items():
        assert rows[code].strip() == entry.title


def test_every_code_is_produced_by_a_fixture_or_a_test() -> None:
    """A documented code that nothing produces is dead: each appears in a fixture's expected
    findings or in a test that asserts it."""
    root = DOC.parent.parent
    produced: set[str] = set()
    for path in [*root.glob("fixtures/*/findings_*.txt"), *root.glob("tests/**/test_*.py")]:
        if path.name != Path(__file__).name:
            produced |= set(re.findall(r"AMP\d{3}", path.read_text(encoding="utf-8")))
    assert set(CODES) - produced == set()
