"""The catalog of finding codes: declared once, by the module that emits them; docs/findings.md
shows the generated table; every code is produced: a rule's by an example or a fixture, a
file-level outcome by a test."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from amprewrite import catalog
from amprewrite.code_index import codes
from amprewrite.generated_docs import with_table
from amprewrite.rules.registry import all_rules

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "findings.md"


def test_the_committed_page_shows_the_generated_table() -> None:
    page = DOC.read_text(encoding="utf-8")
    assert page == with_table(page), "run `python -m amprewrite.generated_docs` and commit the page"
    rows = re.findall(r'^\| <a id="(AMP\d{3})"></a>(AMP\d{3}) \| \w+ \|', page, re.M)
    assert len(rows) == len(codes()) and all(anchor == code for anchor, code in rows)


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


def test_every_code_a_rule_emits_is_seen_in_an_example_or_a_fixture() -> None:
    """A documented code that nothing produces is dead. A rule's code appears in the findings
    of a rule example (tests/test_rule_examples.py checks it is reported) or of a fixture
    (tests/test_fixtures.py and tests/test_projects.py compare them exactly)."""
    seen = {code for rule in all_rules().values() for example in rule.examples
            for code in example.codes}
    for path in [*ROOT.glob("fixtures/*/findings_*.txt"),
                 *ROOT.glob("fixtures/projects/*/findings_*.txt")]:
        seen |= set(re.findall(r"^\S+:\d+:\d+: (AMP\d{3}) ", path.read_text(encoding="utf-8"),
                               re.M))
    emitted = {code for rule in all_rules().values() for code in rule.emits}
    assert emitted - seen == set()


def test_every_code_no_rule_emits_is_produced_by_a_test() -> None:
    """The file-level outcomes that the engine, the runner and the project rewrite report
    themselves (unreadable, unparsable, too large, too slow, an interrupted project write)
    come from no rule's plan: a test asserts each."""
    emitted = {code for rule in all_rules().values() for code in rule.emits}
    asserted: set[str] = set()
    for path in ROOT.glob("tests/**/test_*.py"):
        if path.name != Path(__file__).name:
            asserted |= set(re.findall(r"AMP\d{3}", path.read_text(encoding="utf-8")))
    assert set(codes()) - emitted - asserted == set()
