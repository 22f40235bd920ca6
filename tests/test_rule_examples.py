"""Every rule's examples (next to the rule, as Fixit's VALID/INVALID): the rewrite of each
`before` is exactly its `after` (or leaves it as it is) and reports the codes it names; an
example naming no code is one the rule leaves alone. The rules' conventions: several examples,
a name that is its module's, and codes that belong to one rule (tests/rule_codes.py checks
that a rule emits only its own and those it reports)."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from amprewrite import findings
from amprewrite.catalog import Code
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
    reported = {finding.code for finding in result.findings}
    assert set(example.codes) <= reported
    assert set(example.codes) <= set(rule.emits)
    if not example.codes:  # the rule leaves it alone
        assert set(rule.emits) & reported == set()


def test_every_rule_has_an_example_and_runs_in_a_recipe() -> None:
    rules = all_rules()
    assert [name for name, rule in rules.items() if not (rule.examples or rule.projects)] == []
    used = {rule.name for recipe in recipes() for rule in recipe.rules}
    assert set(rules) == used


def test_every_rule_has_several_examples_and_one_acts() -> None:
    """As Fixit's VALID and INVALID: at least two examples, one of which changes the code or
    reports; a rule acting only across modules shows its fixtures/projects/ trees instead."""
    few = [rule.name for rule in all_rules().values() if not rule.projects
           and not (len(rule.examples) >= 2
                    and any(e.after is not None or e.codes for e in rule.examples))]
    assert few == []


def test_a_rule_is_named_as_its_module() -> None:
    """`rules/framework_switch.py` declares the rule `framework-switch`, and only it."""
    misnamed = {rule.name: rule.plan.__module__ for rule in all_rules().values()
                if rule.plan.__module__ != f"amprewrite.rules.{rule.name.replace('-', '_')}"}
    assert misnamed == {}


def test_every_code_a_rule_names_is_declared() -> None:
    declared = codes()
    for rule in all_rules().values():
        assert all(declared[code] is code for code in rule.emits), rule.name


def test_a_code_belongs_to_one_rule_and_the_others_that_report_it_say_so() -> None:
    """A code is in one rule's `codes`; another rule that reports it too names it in its
    `reports`. The file-level outcomes (`findings.py`: nothing to do, already mixed precision)
    end the rewrite of whichever recipe runs, so several rules may own them."""
    owners: dict[Code, list[str]] = defaultdict(list)
    for rule in all_rules().values():
        for code in rule.codes:
            owners[code].append(rule.name)
    outcomes = {value for value in vars(findings).values() if isinstance(value, Code)}
    assert {code: names for code, names in owners.items()
            if len(names) > 1 and code not in outcomes} == {}
    unowned = {rule.name: [code for code in rule.reports
                           if rule.name in owners.get(code, [rule.name])]
               for rule in all_rules().values()}
    assert {name: found for name, found in unowned.items() if found} == {}


def test_the_committed_rules_page_is_generated_from_the_rules() -> None:
    page = Path(__file__).resolve().parent.parent / "docs" / "rules.md"
    assert page.read_text(encoding="utf-8") == rules_page(), (
        "run `python -m amprewrite.generated_docs` and commit docs/rules.md")


def test_the_architecture_page_lists_every_recipe_and_its_rules_in_order() -> None:
    page = (Path(__file__).resolve().parent.parent / "docs" / "architecture.md").read_text(
        encoding="utf-8")
    row = r"^  \| ([a-z0-9-]+) \| .* \| ([a-z0-9, -]+)(?:;[^|]*)? \|$"
    header, _, *rows = re.findall(row, page, re.M)  # the header, its rule, the recipes
    assert header == ("recipe", "rules")
    assert rows == [(recipe.name, ", ".join(rule.name for rule in recipe.rules))
                    for recipe in recipes()]
