"""Small helpers for building expressions."""

from __future__ import annotations

import libcst as cst

_ATOMIC = (cst.Name, cst.Attribute, cst.Call, cst.Subscript)


def as_receiver(node: cst.BaseExpression) -> cst.BaseExpression:
    """`node` ready to take `.attr`: `loss` stays, `a + b` becomes `(a + b)`."""
    if isinstance(node, _ATOMIC) or node.lpar:
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def as_float(node: cst.CSTNode) -> cst.CSTNode:
    """`x` -> `x.float()`, `a + b` -> `(a + b).float()`."""
    assert isinstance(node, cst.BaseExpression)
    return cst.Call(func=cst.Attribute(value=as_receiver(node), attr=cst.Name("float")))
