"""Thread the grad scaler across modules: a new parameter where it is received, a keyword
argument where it is passed (decided by `amprewrite.project.links`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, declare
from amprewrite.rules.context import RuleContext
from amprewrite.rules.edits import append_arguments, append_parameter, keyword
from amprewrite.rules.registry import rule
from amprewrite.transform import Insert, Replace

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis
    from amprewrite.project.links import ScalerParameter


SCALER_PARAMETER = declare(
    "AMP123", CHANGE, "grad scaler received as a new parameter",
    "A function (or class) using an optimizer it is given by another module also receives "
    "the scaler: `scaler=None`, a new one when a caller passes none. Its callers in the "
    "project pass theirs.",
    why=(
        "A function or class in another module steps, saves or restores an optimizer it "
        "is given, so it needs the scaler too."
    ),
    example=(
        "# engine.py\n"
        "-def train_one_epoch(model, optimizer, loader):\n"
        "+def train_one_epoch(model, optimizer, loader, scaler=None):"
    ),
)

SCALER_PASSED = declare(
    "AMP124", CHANGE, "grad scaler passed to another module",
    "A call handing an optimizer to a function or class of another module that steps, saves "
    "or restores it passes the scaler too.",
    why=(
        "A call hands an optimizer to a function or class of another module that steps, "
        "saves or restores it."
    ),
    example=(
        "# main.py\n"
        "-train_one_epoch(model, optimizer, loader)\n"
        "+train_one_epoch(model, optimizer, loader, scaler=scaler)"
    ),
)


SCALER_INHERITED = declare(
    "AMP125", CHANGE, "grad scaler created by a base class in another module",
    "A class stepping the optimizer its base class stores uses the base's `self.scaler`, "
    "created in the base's `__init__` next to the optimizer (before a resume there), and "
    "saved and restored with the base's checkpoints.",
    why="A class steps an optimizer that its base class, in another module, builds and stores.",
    example=(
        "# base_trainer.py: class BaseTrainer builds self.optimizer\n"
        "+        self.scaler = GradScaler()\n"
        "# trainer.py: class Trainer(BaseTrainer) steps it through self.scaler"
    ),
)


def receive_scaler(ctx: RuleContext, parameter: ScalerParameter, in_class: bool) -> None:
    """`def f(..., scaler=None):` and, for a function, `scaler = scaler or GradScaler()`
    first in its body (a class's `__init__` creates `self.scaler` that way instead)."""
    function, name = parameter.function, parameter.name
    indent = ctx.facts.indentation(function)
    opening = indent + len(f"def {function.name.value}(")
    params = ctx.facts.module.code_for_node(function.params)
    added = f", {name}=None"
    wrap = "\n" not in params and opening + len(params + added) + 2 > ctx.line_limit
    ctx.plan.replaces.append(Replace(function.params, append_parameter(
        name, cst.Name("None"), _aligned_break(opening - indent) if wrap else None)))
    if not in_class and ctx.style is not None and isinstance(function.body, cst.IndentedBlock):
        body = function.body.body
        index = 1 if body and _is_docstring(body[0]) else 0
        line = ctx.parse_statement(f"{name} = {name} or {ctx.style.scaler}")
        ctx.plan.inserts.append(Insert(function.body, index, [line]))
    callers = ", ".join(parameter.callers)
    ctx.notes.append(Note(SCALER_PARAMETER, function.name,
                          f"`{parameter.owner}` receives the grad scaler as a new parameter "
                          f"`{name}`, passed by its callers in {callers} (a new scaler when "
                          "none is passed)"))


def _aligned_break(column: int) -> cst.Comma:
    """`,` then a new line indented to `column` past the statement's own indentation."""
    return cst.Comma(whitespace_after=cst.ParenthesizedWhitespace(
        first_line=cst.TrailingWhitespace(), indent=True,
        last_line=cst.SimpleWhitespace(" " * column)))


def _pass_scaler(ctx: RuleContext, call: cst.Call, name: str) -> None:
    """`f(a, b)` -> `f(a, b, scaler=scaler)`. When that would not fit the file's line length,
    the new argument goes on the next line: under the other arguments when they sit on lines
    of their own, else aligned with the opening parenthesis."""
    argument = keyword(name, ctx.parse_expression(ctx.scaler_expr or ""))
    comma = _wrapping_comma(ctx, call, len(f", {name}={ctx.scaler_expr}"))
    ctx.plan.replaces.append(Replace(call, append_arguments([argument], comma)))


def _wrapping_comma(ctx: RuleContext, call: cst.Call, added: int) -> cst.Comma | None:
    """The comma that puts an argument `added` characters long on a line of its own, or
    None when it fits where it goes."""
    module = ctx.facts.module
    statement = ctx.facts.owner.get(id(call))
    if statement is None:
        return None
    indent = ctx.facts.indentation(statement)
    text = module.code_for_node(call)
    layout = call.whitespace_before_args
    if isinstance(layout, cst.ParenthesizedWhitespace):  # `f(\n    a, b\n)`
        lines = text.splitlines()
        last_line = lines[-2] if len(lines) > 1 and lines[-1].strip() == ")" else lines[-1]
        fits = indent + len(last_line.rstrip(")")) + added <= ctx.line_limit
        return None if fits else cst.Comma(whitespace_after=layout)
    line = module.code_for_node(statement.with_changes(leading_lines=())).rstrip("\r\n")
    start = line.find(text)
    if "\n" in line or start < 0 or indent + len(line) + added <= ctx.line_limit:
        return None
    return _aligned_break(start + len(module.code_for_node(call.func)) + 1)


def _is_docstring(statement: cst.BaseStatement) -> bool:
    return (isinstance(statement, cst.SimpleStatementLine)
            and isinstance(statement.body[0], cst.Expr)
            and isinstance(statement.body[0].value, cst.SimpleString | cst.ConcatenatedString))


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    links = analysis.links
    if not links or ctx.scaler_expr is None:
        return
    if links.inherited is not None:
        inherited = links.inherited
        ctx.notes.append(Note(SCALER_INHERITED, inherited.cls.name, f"`{inherited.cls.name.value}`"
                              f" uses `{inherited.expression}`, created by its base class "
                              f"`{inherited.base}` ({inherited.base_path})"))
    for parameter in links.parameters:
        receive_scaler(ctx, parameter, links.receives_in_class)
    for scaler_pass in links.passes:
        call = scaler_pass.site.call
        _pass_scaler(ctx, call, scaler_pass.keyword)
        ctx.notes.append(Note(SCALER_PASSED, call, f"grad scaler passed to "
                              f"`{scaler_pass.callee}` ({scaler_pass.callee_path}), which uses "
                              "the optimizer it is given"))


RULE = rule("scaler-threading", (SCALER_PARAMETER, SCALER_PASSED, SCALER_INHERITED), _plan,
            projects=("engine_function", "helper_module_checkpoints",
                      "trainer_receives_optimizer", "package_chain", "base_class_checkpoints",
                      "engine_through_package_path", "registry_base_trainer"))
