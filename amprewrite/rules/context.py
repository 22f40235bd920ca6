"""What every rule needs to know about the output being produced."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.training_step import Note
from amprewrite.options import Options
from amprewrite.transform import Plan


@dataclass
class RuleContext:
    """What the rules share while planning one module's rewrite."""

    facts: ModuleFacts
    options: Options
    autocast_call: str  # e.g. `autocast()` or `torch.autocast(amp_device)`
    scaler_expr: str | None = None  # e.g. `scaler` / `self.scaler`; None: no loss scaling
    plan: Plan = field(default_factory=Plan)
    notes: list[Note] = field(default_factory=list)
    hoisted: dict[int, str] = field(default_factory=dict)  # id(backward call) -> loss variable
    new_names: set[str] = field(default_factory=set)  # variables the rewrite introduces
    # id(optimizer step call) -> variable holding the scale before `update()` (plain style)
    scale_before_update: dict[int, str] = field(default_factory=dict)

    def parse_statement(self, code: str) -> cst.SimpleStatementLine:
        statement = cst.parse_statement(code, config=self.facts.module.config_for_parsing)
        assert isinstance(statement, cst.SimpleStatementLine)
        return statement

    def parse_expression(self, code: str) -> cst.BaseExpression:
        return cst.parse_expression(code, config=self.facts.module.config_for_parsing)
