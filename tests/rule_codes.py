"""A rule emits only its own codes and those it reports for others: while the tests rewrite
in-process, every recipe the engine chooses runs with each rule's plan checked, and a note or
a file finding that a plan adds with a code outside its rule's `codes` and `reports` fails the
rewrite. Findings that no rule's plan adds (a recipe's `finish`, the engine's and the
runner's file-level AMP00x) are not checked here."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING

import pytest

from amprewrite import engine
from amprewrite.project import rewrite as project_rewrite
from amprewrite.recipes import choose
from amprewrite.recipes.recipe import Recipe
from amprewrite.rules.registry import Rule

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis
    from amprewrite.options import Options
    from amprewrite.rules.context import RuleContext


class ForeignCode(AssertionError):
    """A rule's plan added a finding with a code its rule does not declare."""


def checked_plan(rule: Rule) -> Callable[[RuleContext, ModuleAnalysis], None]:
    """`rule.plan`, failing when it adds a note or a file finding outside `rule.emits`."""

    def plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
        notes, file_findings = len(ctx.notes), len(ctx.file_findings)
        rule.plan(ctx, analysis)
        emitted = {note.code for note in ctx.notes[notes:]}
        emitted |= {finding.code for finding in ctx.file_findings[file_findings:]}
        if foreign := emitted - set(rule.emits):
            raise ForeignCode(f"rule {rule.name!r} emitted {', '.join(sorted(foreign))}, "
                              "which are not among its codes")

    return plan


_CHECKED: dict[str, Recipe] = {}


def checked_choose(analysis: ModuleAnalysis, options: Options) -> Recipe:
    """The recipe `choose` picks, with every rule's plan checked."""
    recipe = choose(analysis, options)
    if recipe.name not in _CHECKED:
        _CHECKED[recipe.name] = replace(recipe, rules=tuple(
            replace(rule, plan=checked_plan(rule)) for rule in recipe.rules))
    return _CHECKED[recipe.name]


@contextmanager
def rules_checked() -> Iterator[None]:
    """Within the block, the engine and the project rewrite choose checked recipes."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "choose", checked_choose)
        patch.setattr(project_rewrite, "choose", checked_choose)
        yield
