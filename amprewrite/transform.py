"""Carry out a plan of edits on a module: the only place that builds the new tree.

Rules describe edits against nodes of the original tree; `apply_edits` performs them in one
libcst pass, so rules never see each other's output and their order does not matter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis.facts import Block, Statement, body

# What an edit turns a node into: a node, nothing (`RemoveFromParent()`), or several.
Built = cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel[cst.CSTNode]


@dataclass(frozen=True)
class Replace:
    """Replace `node` by `build(updated_node)`."""

    node: cst.CSTNode
    build: Callable[[cst.CSTNode], Built]


@dataclass(frozen=True)
class Wrap:
    """Put statements `start`..`end` of `block` inside `with <item>:`."""

    block: Block
    start: int
    end: int  # `start - 1` for an empty range: the block then holds `tail` only
    item: cst.BaseExpression
    tail: Sequence[Statement] = ()  # new statements ending the with block


@dataclass(frozen=True)
class Insert:
    """Insert statements before position `index` of `block`."""

    block: Block
    index: int
    statements: Sequence[Statement]


@dataclass(frozen=True)
class InsertAfterSmall:
    """Insert small statements right after `small` (a statement line's part)."""

    small: cst.BaseSmallStatement
    statements: Sequence[cst.BaseSmallStatement]


@dataclass
class Plan:
    """Every edit of one module, against nodes of the original tree."""

    replaces: list[Replace] = field(default_factory=list)
    wraps: list[Wrap] = field(default_factory=list)
    inserts: list[Insert] = field(default_factory=list)
    small_inserts: list[InsertAfterSmall] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.replaces or self.wraps or self.inserts or self.small_inserts)

    def edits(self) -> list[Edit]:
        return [*self.replaces, *self.wraps, *self.inserts, *self.small_inserts]

    @classmethod
    def of(cls, edits: Iterable[Edit]) -> Plan:
        """The plan of `edits`, each kind in the order given."""
        plan = cls()
        for edit in edits:
            if isinstance(edit, Replace):
                plan.replaces.append(edit)
            elif isinstance(edit, Wrap):
                plan.wraps.append(edit)
            elif isinstance(edit, Insert):
                plan.inserts.append(edit)
            else:
                plan.small_inserts.append(edit)
        return plan


Edit = Replace | Wrap | Insert | InsertAfterSmall


def apply_edits(
    module: cst.Module, plan: Plan, around: Callable[[cst.CSTNode], list[Statement]]
) -> cst.Module:
    """Carry out `plan`; `around(node)` gives the statements containing a node, so that only
    statements holding an edit are visited (most of a module is left as it is, untouched)."""
    targets = [*(r.node for r in plan.replaces), *(w.block for w in plan.wraps),
               *(i.block for i in plan.inserts), *(i.small for i in plan.small_inserts)]
    visit = {id(s) for node in targets for s in around(node)}
    result = module.visit(_Applier(plan, visit))
    assert isinstance(result, cst.Module)
    return result


class _Applier(cst.CSTTransformer):
    def __init__(self, plan: Plan, visit: set[int]) -> None:
        super().__init__()
        self.visit = visit  # statements that hold an edit: the only ones worth entering
        self.replaces: dict[int, list[Callable[[cst.CSTNode], Built]]] = {}
        for replace in plan.replaces:  # several edits of one node apply in plan order
            self.replaces.setdefault(id(replace.node), []).append(replace.build)
        self.wraps: dict[int, list[Wrap]] = {}
        for wrap in plan.wraps:
            self.wraps.setdefault(id(wrap.block), []).append(wrap)
        self.inserts: dict[int, list[Insert]] = {}
        for insert in plan.inserts:
            self.inserts.setdefault(id(insert.block), []).append(insert)
        self.small_inserts = {id(i.small): i.statements for i in plan.small_inserts}

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.SimpleStatementLine | cst.BaseCompoundStatement):
            return id(node) in self.visit
        return super().on_visit(node)

    def on_leave(  # type: ignore[override]
        self, original_node: cst.CSTNode, updated_node: cst.CSTNode
    ) -> Built:
        updated: Built = super().on_leave(original_node, updated_node)
        for build in self.replaces.get(id(original_node), ()):
            if not isinstance(updated, cst.CSTNode):
                break  # removed or flattened: later edits of the node have nothing to act on
            updated = build(updated)
        return updated

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        # Edits never touch the header and footer comments: keep those very nodes.
        return updated_node.with_changes(body=self._rebuild(original_node, updated_node.body),
                                         header=original_node.header,
                                         footer=original_node.footer)

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        statements = self._rebuild(original_node, body(updated_node))
        if not statements:  # every statement was removed
            statements = [cst.SimpleStatementLine([cst.Pass()])]
        return updated_node.with_changes(body=statements)

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine:
        return updated_node.with_changes(body=self._smalls(original_node.body, updated_node.body))

    def leave_SimpleStatementSuite(
        self, original_node: cst.SimpleStatementSuite, updated_node: cst.SimpleStatementSuite
    ) -> cst.SimpleStatementSuite:
        return updated_node.with_changes(body=self._smalls(original_node.body, updated_node.body))

    def _smalls(
        self,
        original: Sequence[cst.BaseSmallStatement],
        updated: Sequence[cst.BaseSmallStatement],
    ) -> list[cst.BaseSmallStatement]:
        out: list[cst.BaseSmallStatement] = []
        for before, after in zip(original, updated, strict=True):
            out.append(after)
            out.extend(self.small_inserts.get(id(before), ()))
        if len(out) == len(updated):
            return list(updated)
        semicolon = cst.Semicolon(whitespace_before=cst.SimpleWhitespace(""),
                                  whitespace_after=cst.SimpleWhitespace(" "))
        joined = [s.with_changes(semicolon=semicolon) for s in out[:-1]]
        return [*joined, out[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)]

    def _rebuild(self, original: Block, statements: Sequence[Statement]) -> list[Statement]:
        wraps = {w.start: w for w in self.wraps.get(id(original), [])}
        inserts: dict[int, list[Statement]] = {}
        for insert in self.inserts.get(id(original), []):
            inserts.setdefault(insert.index, []).extend(insert.statements)
        updated = list(statements)
        if not wraps and not inserts:
            return updated
        out: list[Statement] = []
        index = 0
        while index < len(updated):
            out.extend(inserts.get(index, ()))
            wrap = wraps.get(index)
            if wrap is None:
                out.append(updated[index])
                index += 1
                continue
            del wraps[index]
            if wrap.end < wrap.start:  # only new statements: they take the comments above
                block = _with_block(wrap.item, [*wrap.tail])
                out.append(block.with_changes(leading_lines=updated[index].leading_lines))
                updated[index] = updated[index].with_changes(leading_lines=())
                continue
            body = [*updated[wrap.start : wrap.end + 1], *wrap.tail]
            out.append(_with_block(wrap.item, body))
            index = wrap.end + 1
        out.extend(inserts.get(len(updated), ()))
        return out


def _with_block(item: cst.BaseExpression, statements: list[Statement]) -> cst.With:
    """`with item:` around `statements`; the first statement's leading comments move above."""
    first = statements[0]
    statements[0] = first.with_changes(leading_lines=())
    return cst.With(
        items=[cst.WithItem(item=item)],
        body=cst.IndentedBlock(body=statements),
        leading_lines=first.leading_lines,
    )
