"""A recipe: a named choice of rules, the condition under which it runs, and the context its
rules share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from amprewrite.analysis import ModuleAnalysis
from amprewrite.options import Options
from amprewrite.rules.context import RuleContext
from amprewrite.rules.registry import Rule


@dataclass(frozen=True)
class Recipe:
    """A named choice of rules, in the order they plan."""

    name: str
    applies: Callable[[ModuleAnalysis, Options], bool]
    context: Callable[[ModuleAnalysis, Options], RuleContext]
    rules: tuple[Rule, ...]
    # Called once the rules have planned (module-level imports and definitions, notes about
    # the whole file); None: nothing more.
    finish: Callable[[RuleContext, ModuleAnalysis], None] | None = None
    # Whether the result is rewritten again with these options (a migration); None: never.
    rewrites_result: Callable[[Options], bool] | None = None
    # Whether that result is plain FP32 (apex taken out), kept only where the rewrite then
    # takes it into mixed precision (`engine._then_rewrite`).
    result_goes_fp32: bool = False
    # The file's precision is its author's or a framework's (a lint, a framework's switch):
    # the sites of its ledger are theirs, checked by this recipe (`ledger`).
    owns_precision: bool = False


def plain_context(analysis: ModuleAnalysis, options: Options) -> RuleContext:
    """A context with no autocast and no scaler decided: for rules that remove or lint."""
    return RuleContext(analysis.facts, options, "")
