"""The code rules add, as libcst nodes. The commonest snippets (`scaler.step`, `autocast()`,
`scaler.update()`, `scaler = GradScaler()`) are built directly: each trip through libcst's
parser costs about a millisecond, several per rewritten file. The rest is parsed."""

from __future__ import annotations

import keyword
import re

import libcst as cst

_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_ASSIGNED_CALL = re.compile(r"([A-Za-z_][\w.]*) = ([A-Za-z_][\w.]*)\(\)")


def expression(code: str, config: cst.PartialParserConfig) -> cst.BaseExpression:
    """`code` as an expression node: a dotted name, or its call without arguments, built;
    anything else parsed."""
    built = _built_expression(code)
    return built if built is not None else cst.parse_expression(code, config=config)


def statement(code: str, config: cst.PartialParserConfig) -> cst.SimpleStatementLine:
    """`code` as one simple statement line: `name()` or `target = name()` built (dotted
    names), anything else parsed."""
    line: cst.BaseStatement | None = None
    call = _built_call(code)
    if call is not None:
        line = cst.SimpleStatementLine([cst.Expr(call)])
    elif (match := _ASSIGNED_CALL.fullmatch(code)) is not None:
        target, value = _dotted(match[1]), _built_call(f"{match[2]}()")
        if target is not None and value is not None:
            line = cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(target)], value)])
    if line is None:
        line = cst.parse_statement(code, config=config)
    assert isinstance(line, cst.SimpleStatementLine)
    return line


def _built_expression(code: str) -> cst.BaseExpression | None:
    return _dotted(code) or _built_call(code)


def _built_call(code: str) -> cst.Call | None:
    if not code.endswith("()"):
        return None
    func = _dotted(code[:-2])
    return None if func is None else cst.Call(func)


def _dotted(code: str) -> cst.Name | cst.Attribute | None:
    if _DOTTED.fullmatch(code) is None:
        return None
    first, *rest = code.split(".")
    if any(keyword.iskeyword(part) for part in (first, *rest)):
        return None
    node: cst.Name | cst.Attribute = cst.Name(first)
    for part in rest:
        node = cst.Attribute(node, cst.Name(part))
    return node
