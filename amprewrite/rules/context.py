"""What every rule needs to know about the output being produced."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.names import FreshNames
from amprewrite.analysis.training_step import Note
from amprewrite.findings import Finding
from amprewrite.options import Options
from amprewrite.rules import snippets
from amprewrite.rules.imports import torch_name
from amprewrite.transform import Plan

if TYPE_CHECKING:
    from amprewrite.analysis.scaler_home import ScalerHome
    from amprewrite.rules.styles import Style


@dataclass
class RuleContext:
    """What the rules share while planning one module's rewrite. The recipe fills in its
    decisions (names, the scaler, the output style) before any rule runs; rules only add
    edits and notes."""

    facts: ModuleFacts
    options: Options
    autocast_call: str  # e.g. `autocast()` or `torch.autocast(amp_device)`
    scaler_expr: str | None = None  # e.g. `scaler` / `self.scaler`; None: no loss scaling
    scaler_home: ScalerHome | None = None  # where the scaler is created
    style: Style | None = None  # how the rewrite spells AMP (its imports, constructors)
    plan: Plan = field(default_factory=Plan)
    notes: list[Note] = field(default_factory=list)
    file_findings: list[Finding] = field(default_factory=list)  # about the file, at 1:1
    names: FreshNames = None  # type: ignore[assignment]  # default: the module's own names
    # id(backward call whose receiver computes the loss) -> the variable it is hoisted into
    hoisted: dict[int, str] = field(default_factory=dict)
    # id(optimizer step call) -> variable holding the scale before `update()` (plain style)
    scale_before_update: dict[int, str] = field(default_factory=dict)
    # What a migration found the script asked for: the options its FP32 result is rewritten
    # with (apex's opt level and properties; None: the user's), and the grad scaler's
    # arguments as the script's own source text (`opt_level=args.opt_level`).
    next_options: Options | None = None
    scaler_arguments: tuple[str, ...] | None = None
    # what `scaler.initialize(model, optimizer, ...)` passes after those two: a migration's
    # opt level and properties that only the function building the optimizer can read
    initialize_arguments: tuple[str, ...] = ()
    level_at_run_time: bool = False  # a migration's opt level is an expression (`args.level`)

    def __post_init__(self) -> None:
        if self.names is None:
            self.names = FreshNames(self.facts.names)

    @property
    def line_limit(self) -> int:
        """The columns added code may take: the project's configured line length, else the
        file's own (`ModuleFacts.line_limit`)."""
        return self.options.line_length or self.facts.line_limit

    def torch(self) -> str:
        """The module's name for torch; `import torch` joins the style's imports when it has
        none."""
        assert self.style is not None
        name = torch_name(self.facts)
        if name is None and "import torch" not in self.style.imports:
            self.style.imports.insert(0, "import torch")
        return name or "torch"

    def parse_statement(self, code: str) -> cst.SimpleStatementLine:
        return snippets.statement(code, self.facts.module.config_for_parsing)

    def parse_expression(self, code: str) -> cst.BaseExpression:
        return snippets.expression(code, self.facts.module.config_for_parsing)
