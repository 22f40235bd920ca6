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
