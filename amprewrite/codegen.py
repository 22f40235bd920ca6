"""Rendering code and locating nodes, at a fraction of libcst's own cost.

Rendering (`Module.code`) and positions (`PositionProvider`) are libcst code-generation passes
over a whole module, and each cost about as much as the analysis. Here:

- `locate()` runs one pass over the original module that keeps no text: it counts lines,
  columns and characters, and records where the asked-for nodes start (for findings) and
  where each top-level statement's text begins and ends.
- `render_module()` builds the new module's text from the original's: a top-level statement
  the rewrite did not touch is copied from the original text; only new or changed ones are
  rendered. Anything unusual (a header or footer changed, no trailing newline, a source that
  is not what libcst would render) falls back to rendering the whole module.

Both drive libcst's code generator (`CodegenState`, `CSTNode._codegen`), a private API; the
tests compare every result with libcst's public `Module.code` and `PositionProvider`.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import libcst as cst
from libcst._nodes.internal import CodegenState

_NEWLINE = re.compile(r"\r\n?|\n")
_NOTHING_TO_RECORD = nullcontext()


class _Renderer(CodegenState):
    """libcst's code generator without the syntactic-position bookkeeping it does for the
    `PositionProvider` (a generator-based context manager entered for most nodes)."""

    def record_syntactic_position(self, node: cst.CSTNode, **_: Any) -> Any:
        return _NOTHING_TO_RECORD


def render(node: cst.CSTNode, module: cst.Module) -> str:
    """The code of `node` (any node; `module` gives the indentation and newline style)."""
    state = _Renderer(module.default_indent, module.default_newline)
    node._codegen(state)
    return "".join(state.tokens)


@dataclass(frozen=True)
class Layout:
    """What `locate()` found in a module's text."""

    starts: dict[cst.CSTNode, tuple[int, int]]  # asked node -> 1-based line, 0-based column
    spans: list[tuple[int, int]]  # character offsets of each top-level statement's text
    length: int  # characters of the whole module's text


class _Locator(_Renderer):
    """A code generator that keeps no text: only the current line, column and offset.

    Nodes are tracked by `id()`: a libcst node's own `__hash__` is a Python call, and this
    runs for every node of the module."""

    def __init__(self, module: cst.Module, nodes: Collection[cst.CSTNode]) -> None:
        super().__init__(module.default_indent, module.default_newline)
        self.line, self.column, self.offset = 1, 0, 0
        self.last_token = ""
        self.wanted = {id(node) for node in nodes}  # and first statements of asked blocks
        self.top_level = {id(statement) for statement in module.body}
        self.tracked = self.wanted | self.top_level
        self.starts: dict[int, tuple[int, int]] = {}
        self.spans: list[tuple[int, int]] = []
        self._pending: dict[int, tuple[int, int, int]] = {}
        # No text is kept, but `Module` adds a newline to a file whose token list is empty:
        # an empty token keeps it from doing so where the file is not empty.
        self.tokens.append("")

    def add_indent_tokens(self) -> None:
        for token in self.indent_tokens:
            self.column += len(token)
            self.offset += len(token)

    def add_token(self, value: str) -> None:
        self.offset += len(value)
        self.last_token = value
        if "\n" not in value and "\r" not in value:
            self.column += len(value)
            return
        segments = _NEWLINE.split(value)
        self.line += len(segments) - 1
        self.column = len(segments[-1])

    def pop_trailing_newline(self) -> None:
        """The file has no last newline (the last statement's span keeps it: such a module
        is rendered whole, see `render_module`)."""
        self.offset -= len(self.last_token)

    def before_codegen(self, node: cst.CSTNode) -> None:
        if id(node) in self.tracked:
            self._pending[id(node)] = (self.line, self.column, self.offset)

    def after_codegen(self, node: cst.CSTNode) -> None:
        key = id(node)
        if key not in self.tracked:
            return
        line, column, offset = self._pending.pop(key)
        if key in self.wanted:
            self.starts.setdefault(key, (line, column))  # unless its syntactic start is known
        if key in self.top_level:
            self.spans.append((offset, self.offset))

    def record_syntactic_position(
        self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None, **_: Any
    ) -> Any:
        """Where a statement starts past its comments (as `PositionProvider` reports it)."""
        key = id(node)
        if key in self.wanted:
            if start_node is None:
                self.starts[key] = (self.line, self.column)
            else:  # an indented block starts where its first statement does
                self.wanted.add(id(start_node))
                self.tracked.add(id(start_node))
                return _StartOfFirst(self.starts, key, id(start_node))
        return _NOTHING_TO_RECORD


class _StartOfFirst:
    """Gives a block the start of its first statement once that has been rendered."""

    def __init__(self, starts: dict[int, tuple[int, int]], block: int, first: int) -> None:
        self.starts, self.block, self.first = starts, block, first

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc_info: object) -> None:
        self.starts[self.block] = self.starts[self.first]


def locate(module: cst.Module, nodes: Collection[cst.CSTNode]) -> Layout:
    """Where each of `nodes` (all in `module`) starts, and the spans of top-level statements."""
    locator = _Locator(module, nodes)
    module._codegen(locator)
    return Layout({node: locator.starts[id(node)] for node in nodes}, locator.spans,
                  locator.offset)


def render_module(new: cst.Module, old: cst.Module, layout: Layout, source: bytes) -> bytes:
    """`new.bytes`, where `new` is `old` (parsed from `source`, laid out by `locate`) with
    some top-level statements replaced, removed or added."""
    if new is old:
        return source
    text = source.decode(old.encoding)  # what libcst renders: a BOM is part of the encoding
    if not _splices(new, old, layout, text):
        return render(new, new).encode(new.encoding)
    spans = {id(statement): span for statement, span in zip(old.body, layout.spans, strict=True)}
    parts = [text[: layout.spans[0][0]]]  # the header: comments and blank lines
    for statement in new.body:
        span = spans.get(id(statement))
        parts.append(render(statement, new) if span is None else text[span[0] : span[1]])
    parts.append(text[layout.spans[-1][1] :])  # the footer
    return "".join(parts).encode(new.encoding)


def _splices(new: cst.Module, old: cst.Module, layout: Layout, text: str) -> bool:
    """Whether `new` can be built from pieces of `old`'s text."""
    return (
        bool(old.body) and len(layout.spans) == len(old.body) and layout.length == len(text)
        and old.has_trailing_newline and new.has_trailing_newline
        and (new.encoding, new.default_indent, new.default_newline)
        == (old.encoding, old.default_indent, old.default_newline)
        and _same_nodes(new.header, old.header) and _same_nodes(new.footer, old.footer)
    )


def _same_nodes(first: Collection[cst.CSTNode], second: Collection[cst.CSTNode]) -> bool:
    return len(first) == len(second) and all(a is b for a, b in zip(first, second, strict=True))
