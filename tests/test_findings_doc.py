"""The catalog of finding codes: declared once, by the module that emits them; docs/findings.md
shows the generated table; every code is produced by a fixture or a test."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from amprewrite import catalog
from amprewrite.code_index import codes
from amprewrite.generated_docs import with_table

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "findings.md"


def test_the_committed_page_shows_the_generated_table() -> None:
    page = DOC.read_text(encoding="utf-8")
    assert page == with_table(page), "run `python -m amprewrite.generated_docs` and commit the page"
    assert len(re.findall(r"^\| AMP\d{3} \| \w+ \|", page, re.M)) == len(codes())


def test_codes_are_distinct_and_declaring_one_again_fails() -> None:
    declared = codes()
    assert len(declared) == len({code.title for code in declared.values()})
    with pytest.raises(ValueError, match="AMP102 declared twice"):
        catalog.declare("AMP102", catalog.CHANGE, "again", "twice", why="twice")


def test_no_code_is_spelled_as_a_string_outside_its_declaration() -> None:
    """Modules name codes by their constant (`BACKWARD_SCALED`), never by "AMP102"."""
    spelled = []
    for path in sorted((ROOT / "amprewrite").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        declared = {id(call.args[0]) for call in ast.walk(tree) if isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Name) and call.func.id == "declare"}
        spelled += [f"{path.relative_to(ROOT)}:{node.lineno}" for node in ast.walk(tree)
                    if isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and re.fullmatch(r"AMP\d{3}", node.value) and id(node) not in declared]
    assert spelled == []


def test_every_code_is_produced_by_a_fixture_or_a_test() -> None:
    """A documented code that nothing produces is dead: each appears in a fixture's expected
    findings, a rule's examples or a test that asserts it."""
    produced: set[str] = set()
    for path in [*ROOT.glob("fixtures/*/findings_*.txt"),
                 *ROOT.glob("fixtures/projects/*/findings_*.txt"),
                 *ROOT.glob("tests/**/test_*.py")]:
        if path.name != Path(__file__).name:
            produced |= set(re.findall(r"AMP\d{3}", path.read_text(encoding="utf-8")))
    assert set(codes()) - produced == set()
