"""Outside the statements a plan edits, a rewrite leaves the program as it was: statement by
statement, in order, with the statements the plan wraps or inserts allowed and nothing else.

Top-level statements are compared by their text; where the texts differ, the input's
statements there (of its `ast` tree) are compared with the output's one statement at a time,
by the code of each statement's own lines and the blocks it holds."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import cached_property

from amprewrite.protocol.outline import BLOCK_FIELDS

_END = "end"


@dataclass(frozen=True)
class Edited:
    """The input's lines a plan may change: statements starting on `lines` may change their
    own code (a compound statement its header), statements within `spans` may change wholly."""

    lines: frozenset[int]
    spans: tuple[tuple[int, int], ...]

    def allows(self, statement: ast.stmt) -> bool:
        return statement.lineno in self.lines or any(
            first <= statement.lineno <= last for first, last in self.spans)


@dataclass(frozen=True)
class Change:
    """An input statement the output changed though no edit touched it."""

    line: int
    scope: str  # the qualified name of the function holding it ("" at module level)


@dataclass(frozen=True)
class TopLevel:
    """The input's top-level statements as character spans of its text."""

    text: str
    spans: Sequence[tuple[int, int]]

    @cached_property
    def texts(self) -> list[str]:
        return [self.text[start:end] for start, end in self.spans]

    @cached_property
    def normalised(self) -> list[str]:
        return [_normalised(text) for text in self.texts]


@dataclass(frozen=True)
class Rendered:
    """The output's top-level statements: its lines, each statement's text and that text
    normalised (as `TopLevel`'s, to compare the two)."""

    lines: list[str]
    texts: list[str]
    normalised: list[str]


def rendered(tree: ast.Module, text: str) -> Rendered:
    lines = text.splitlines()
    texts = [_text(statement, lines) for statement in tree.body]
    return Rendered(lines, texts, [_normalised(t) for t in texts])


def changed_outside(
    before: TopLevel, before_tree: ast.Module, after: ast.Module, texts: Rendered,
    edited: Edited,
) -> list[Change]:
    """The statements of the input (parsed as `before_tree`) that the output (parsed as
    `after`, its statements' `texts`) changes, moves or drops, outside `edited`."""
    after_lines = texts.lines
    old, new = before.normalised, texts.normalised
    changes: list[Change] = []
    old_lines: list[str] | None = None
    matcher = SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal" or i1 == i2:
            continue
        first = before.text.count("\n", 0, before.spans[i1][0]) + 1
        last = before.text.count("\n", 0, before.spans[i2 - 1][1] - 1) + 1
        if old_lines is None:
            old_lines = before.text.splitlines()
        region = [s for s in before_tree.body if first <= s.lineno <= last]
        changes += _compare(region, old_lines, after.body[j1:j2], after_lines, edited)
    return changes


def _normalised(text: str) -> str:
    """A statement's text without blank and comment lines and indentation."""
    lines = (line.strip() for line in text.splitlines())
    return "\n".join(line for line in lines if line and not line.startswith("#"))


def _text(statement: ast.stmt, lines: list[str]) -> str:
    return "\n".join(lines[_first_line(statement) - 1 : statement.end_lineno or statement.lineno])


def _compare(
    old: list[ast.stmt], old_lines: list[str], new: list[ast.stmt], new_lines: list[str],
    edited: Edited,
) -> list[Change]:
    """Statement tokens of two regions, matched in order: each input token the output lacks
    must belong to an edited statement."""
    before = list(_tokens(old, old_lines, ""))
    after = [token for token, _, _ in _tokens(new, new_lines, "")]
    matcher = SequenceMatcher(None, [t for t, _, _ in before], after, autojunk=False)
    changes: dict[int, Change] = {}
    for tag, i1, i2, _, _ in matcher.get_opcodes():
        if tag in ("delete", "replace"):
            for _, statement, scope in before[i1:i2]:
                if not edited.allows(statement):
                    changes.setdefault(statement.lineno, Change(statement.lineno, scope))
    return list(changes.values())


def _tokens(
    body: list[ast.stmt], lines: list[str], scope: str
) -> Iterator[tuple[tuple[str, ...], ast.stmt, str]]:
    """A statement's own code, then each of its blocks between markers that name it, in
    order (the markers of two statements never match each other)."""
    for statement in body:
        header = _header(statement, lines)
        yield (header,), statement, scope
        inner = scope
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            inner = f"{scope}.{statement.name}" if scope else statement.name
        for name in BLOCK_FIELDS:
            items = getattr(statement, name, None)
            if not items:
                continue
            yield (name, header), statement, scope
            for item in items:
                if isinstance(item, ast.ExceptHandler | ast.match_case):
                    case = _header(item, lines)
                    yield (case,), statement, scope
                    yield from _tokens(item.body, lines, inner)
                    yield (_END, case), statement, scope
                else:
                    yield from _tokens([item], lines, inner)
            yield (_END, name, header), statement, scope


def _header(node: ast.AST, lines: list[str]) -> str:
    """The code of a statement's own lines (up to its first nested statement), without
    indentation, blank lines and comment lines: what the rewrite must leave as it was."""
    first = _first_line(node)  # type: ignore[arg-type]
    last = node.end_lineno or first  # type: ignore[attr-defined]
    body = getattr(node, "body", None)
    if body and isinstance(body[0], ast.stmt):
        inner = _first_line(body[0])
        if inner == node.lineno:  # type: ignore[attr-defined]
            return f"{type(node).__name__}|{ast.dump(node)}"  # `if x: y` on one line
        last = max(node.lineno, inner - 1)  # type: ignore[attr-defined]
    return _normalised("\n".join(lines[first - 1 : last]))


def _first_line(statement: ast.stmt) -> int:
    """Where a statement's code starts: its first decorator's line, if any."""
    decorators = getattr(statement, "decorator_list", None)
    return decorators[0].lineno if decorators else statement.lineno
