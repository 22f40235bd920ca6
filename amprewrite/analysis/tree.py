"""Cheap walks over a libcst tree: the syntax children of a node, in source order.

libcst's own `node.children` and `node.visit()` rebuild every node they pass (a validated
dataclass per node), which made walking cost more than parsing. These read the fields of a
node instead. Whitespace, comments, parentheses, punctuation and operator tokens are left out:
no analysis looks for them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import libcst as cst

_TRIVIA_FIELDS = frozenset({
    "lpar", "rpar", "lbracket", "rbracket", "lbrace", "rbrace", "leading_lines",
    "lines_after_decorators", "header", "footer", "trailing_whitespace", "newline", "comma",
    "semicolon", "equal", "colon", "first_colon", "second_colon", "dot", "relative",
    "operator", "asynchronous", "posonly_ind", "separator", "trailing_comma",
})

# Types whose fields are not declared in source order.
_SOURCE_ORDER = {
    cst.Arg: ("keyword", "value"),
    cst.ClassDef: ("decorators", "name", "type_parameters", "bases", "keywords", "body"),
    cst.ExceptHandler: ("type", "name", "body"),
    cst.ExceptStarHandler: ("type", "name", "body"),
    cst.FunctionDef: ("decorators", "name", "type_parameters", "params", "returns", "body"),
    cst.IfExp: ("body", "test", "orelse"),
    cst.MatchCase: ("pattern", "guard", "body"),
    cst.Parameters: ("posonly_params", "params", "star_arg", "kwonly_params", "star_kwarg"),
    cst.TypeAlias: ("name", "type_parameters", "value"),
}

_fields_of: dict[type[cst.CSTNode], tuple[str, ...]] = {}


def node_types(base: type) -> frozenset[type[cst.CSTNode]]:
    """`base` and every libcst class derived from it. `type(node) in node_types(...)` is a set
    lookup, where `isinstance` goes through ABCMeta in Python on every call."""
    found: set[type] = {base}
    pending: list[type] = [base]
    while pending:
        subclasses: list[type] = pending.pop().__subclasses__()
        for subclass in subclasses:
            if subclass not in found:
                found.add(subclass)
                pending.append(subclass)
    return frozenset(found)


NODES = node_types(cst.CSTNode)


def _child_fields(kind: type[cst.CSTNode]) -> tuple[str, ...]:
    names = _SOURCE_ORDER.get(kind)
    if names is None:
        names = tuple(
            field.name for field in dataclasses.fields(kind)
            if field.name not in _TRIVIA_FIELDS and not field.name.startswith(
                ("whitespace", "leading_whitespace"))
        )
    _fields_of[kind] = names
    return names


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The syntax children of `node` in source order (no whitespace, comments or tokens)."""
    node_type = type(node)
    names = _fields_of.get(node_type)
    if names is None:
        names = _child_fields(node_type)
    found: list[cst.CSTNode] = []
    for name in names:
        value = getattr(node, name)
        value_type = type(value)
        if value_type in NODES:
            found.append(value)
        elif value_type is tuple or value_type is list:  # libcst's sequences hold nodes only
            found.extend(value)
    return found


def descendants(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`node` and every syntax node under it, in no particular order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(children(current))
