"""Every rule's examples (next to the rule, as Fixit's VALID/INVALID): the rewrite of each
`before` is exactly its `after` (or leaves it as it is) and reports the codes it names."""

from __future__ import annotations

from pathlib import Path

import pytest

from amprewrite.code_index import codes
from amprewrite.engine import rewrite_source
from amprewrite.generated_docs import rules_page
from amprewrite.recipes import recipes
from amprewrite.rules.registry import Example, Rule, all_rules

EXAMPLES = [(rule, index, example) for rule in all_rules().values()
            for index, example in enumerate(rule.examples)]


@pytest.mark.parametrize(("rule", "index", "example"), EXAMPLES,
                         ids=[f"{rule.name}-{index}" for rule, index, _ in EXAMPLES])
def test_example(rule: Rule, index: int, example: Example) -> None:
    result = rewrite_source(example.before.encode(), example.options)
    expected = example.before if example.after is None else example.after
    assert result.source.decode() == expected
    assert set(example.codes) <= {finding.code for finding in result.findings}
    assert set(example.codes) <= set(rule.codes)


def test_every_rule_has_an_example_and_runs_in_a_recipe() -> None:
    rules = all_rules()
    assert [name for name, rule in rules.items() if not (rule.examples or rule.projects)] == []
    used = {rule.name for recipe in recipes() for rule in recipe.rules}
    assert set(rules) == used


def test_every_code_a_rule_names_is_declared() -> None:
    declared = codes()
    for rule in all_rules().values():
        assert all(declared[code] is code for code in rule.codes), rule.name


def test_the_committed_rules_page_is_generated_from_the_rules() -> None:
    page = Path(__file__).resolve().parent.parent / "docs" / "rules.md"
    assert page.read_text(encoding="utf-8") == rules_page(), (
        "run `python -m amprewrite.generated_docs` and commit docs/rules.md")
