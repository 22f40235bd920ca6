"""Adding and removing an element of a dict literal or a call's arguments, keeping its style."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

Container = cst.Dict | cst.Call


def _attribute(container: cst.CSTNode) -> str:
    return "elements" if isinstance(container, cst.Dict) else "args"


def insert_after(
    container: Container, anchor: cst.CSTNode, new: cst.CSTNode
) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """A builder inserting `new` after `anchor`, with the separator and trailing-comma style
    of the items around it."""
    attribute = _attribute(container)
    position = list(getattr(container, attribute)).index(anchor)

    def build(node: cst.CSTNode) -> cst.CSTNode:
        items = list(getattr(node, attribute))
        current = items[position]
        if position + 1 < len(items):
            added = new.with_changes(comma=current.comma)
        else:
            separator = items[position - 1].comma if position > 0 else cst.Comma(
                whitespace_after=cst.SimpleWhitespace(" "))
            added = new.with_changes(comma=current.comma)
            items[position] = current.with_changes(comma=separator)
        return node.with_changes(**{attribute: [*items[: position + 1], added,
                                                *items[position + 1 :]]})

    return build


def without(container: Container, item: cst.CSTNode) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """A builder removing `item` (found by structure, so other edits of the same container may
    come first); when it was last, the new last item takes its comma."""
    attribute = _attribute(container)

    def build(node: cst.CSTNode) -> cst.CSTNode:
        items = list(getattr(node, attribute))
        position = next(i for i, candidate in enumerate(items)
                        if candidate.deep_equals(item.with_changes(comma=candidate.comma)))
        removed = items.pop(position)
        if position == len(items) and position > 0:
            items[-1] = items[-1].with_changes(comma=removed.comma)
        return node.with_changes(**{attribute: items})

    return build


def one_per_line(
    build: Callable[[cst.CSTNode], cst.CSTNode], indent: str
) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """`build`, then its container's items one per line, `indent` deeper than the statement,
    each with a trailing comma, the closing bracket on a line of its own (the common style
    for a dict or call too long for one line)."""

    def newline(extra: str) -> cst.ParenthesizedWhitespace:
        return cst.ParenthesizedWhitespace(indent=True, last_line=cst.SimpleWhitespace(extra))

    def wrap(node: cst.CSTNode) -> cst.CSTNode:
        built = build(node)
        assert isinstance(built, Container)
        attribute = _attribute(built)
        items = list(getattr(built, attribute))
        items = [item.with_changes(comma=cst.Comma(whitespace_after=newline(
            indent if index + 1 < len(items) else ""))) for index, item in enumerate(items)]
        if isinstance(built, cst.Dict):
            return built.with_changes(elements=items, lbrace=cst.LeftCurlyBrace(
                whitespace_after=newline(indent)), rbrace=cst.RightCurlyBrace())
        return built.with_changes(args=items, whitespace_before_args=newline(indent))

    return wrap
