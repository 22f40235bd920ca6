"""Rules as data: each rule module declares its `Rule` (name, codes, plan, examples), which
registers it by import; recipes (`amprewrite.recipes`) name the rules they run, in order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from amprewrite import code_index
from amprewrite.catalog import Code
from amprewrite.options import Options

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis
    from amprewrite.rules.context import RuleContext


@dataclass(frozen=True)
class Example:
    """A small script before and after the rewrite (None: left as it is), with the codes of
    the rule its findings must include. Examples are the rule's tests and its docs."""

    before: str
    after: str | None
    codes: tuple[Code, ...]
    options: Options = field(default_factory=Options)


@dataclass(frozen=True)
class Rule:
    """One rewrite concern: the codes it emits and how it plans its edits."""

    name: str
    codes: tuple[Code, ...]
    plan: Callable[[RuleContext, ModuleAnalysis], None]
    examples: tuple[Example, ...] = ()
    # Cases of fixtures/projects/ showing a rule that only acts across modules (its examples
    # are whole trees; tests/test_projects.py checks they report the rule's codes).
    projects: tuple[str, ...] = ()
    # Codes another rule owns that this one reports too, where its recipe runs it instead of
    # that rule (a file with nothing to rewrite still shows the training sites left alone).
    reports: tuple[Code, ...] = ()

    @property
    def emits(self) -> tuple[Code, ...]:
        """Every code the rule's plan may report: its own, then those it reports for others."""
        return (*self.codes, *self.reports)


RULES: dict[str, Rule] = {}


def rule(
    name: str,
    codes: tuple[Code, ...],
    plan: Callable[[RuleContext, ModuleAnalysis], None],
    examples: tuple[Example, ...] = (),
    projects: tuple[str, ...] = (),
    reports: tuple[Code, ...] = (),
) -> Rule:
    """Declare and register a rule; a name registered twice is a programming error."""
    if name in RULES:
        raise ValueError(f"rule {name!r} registered twice")
    declared = Rule(name, codes, plan, examples, projects, reports)
    RULES[name] = declared
    return declared


def all_rules() -> dict[str, Rule]:
    """Every rule, after importing every rule module."""
    code_index.codes()  # imports every module of amprewrite.rules (and the analysis)
    return dict(RULES)
