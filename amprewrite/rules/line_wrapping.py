"""Statements the rewrite adds, wrapped as black would when they pass the line limit.

`scaler = GradScaler(args.opt_level, keep_batchnorm_fp32=..., loss_scale=...)` after an apex
migration can pass 110 columns. Past the limit (`RuleContext.line_limit`), the call's arguments
go on one line of their own; when that line is still too long, one argument per line with a
trailing comma.
"""

from __future__ import annotations

import libcst as cst


def fitted_to_line(code: str, indent: int, unit: str, limit: int) -> str:
    """`code`, one statement ending in a call (`x = f(a, b)`, `f(a, b)`), as it fits `limit`
    columns at `indent` columns (its continuation lines indented by `unit` more, written
    relative to the statement's block)."""
    if indent + len(code) <= limit or not code.endswith(")"):
        return code
    statement = cst.parse_statement(code)
    call = _call(statement)
    if call is None or not call.args:
        return code
    module = cst.Module([])
    head = code[:len(code) - len(module.code_for_node(call))]
    head += module.code_for_node(call.func) + "("
    arguments = [module.code_for_node(a.with_changes(comma=cst.MaybeSentinel.DEFAULT))
                 for a in call.args]
    together = ", ".join(arguments)
    # continuation lines relative to the block: libcst indents them with the statement
    if indent + len(unit) + len(together) <= limit:
        return f"{head}\n{unit}{together}\n)"
    return "\n".join([head, *(f"{unit}{a}," for a in arguments), ")"])


def _call(statement: cst.BaseStatement) -> cst.Call | None:
    """The call a one-statement line ends in: an assignment's value or an expression."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    value = small.value if isinstance(small, cst.Assign | cst.Expr) else None
    return value if isinstance(value, cst.Call) else None
