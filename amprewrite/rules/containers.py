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
