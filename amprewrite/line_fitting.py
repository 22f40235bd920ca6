"""Lines the rewrite made longer than the line limit, wrapped as black wraps them.

A rewrite lengthens lines in place: `torch.tanh(z.float())`, `.to(q_target.dtype)`, an
argument added to `Accelerator(...)`, a statement moved one level deeper into
`with autocast():`. Each such line past the limit (the project's configured line length, else
the file's own: `RuleContext.line_limit`) is split the way black splits it:

- at the last bracket pair whose opening line fits (`f(` / arguments / `).item()`);
- an assignment or `return` whose value holds operators in parentheses of its own
  (`loss = (` / `a + b` / `)`);
- contents that still do not fit go one item per line with a trailing comma, one operand
  per line with the operator first, or a method chain one link per line (`.detach()`);
  `from m import a, b` gets parentheses and a name per line;
- a continuation line inside the author's own brackets is filled up to the limit and the
  items that overflow go on the next line, at the same indentation.

Lines the author wrote over the limit stay as they are, and so do lines carrying a directive
comment (`# noqa`, `# type:`, `# fmt:`, `# pragma`, `# amprewrite:`). A wrapping that would
change the program's `ast` is dropped: the text is only re-laid out, never changed.

`line_joiner` is the way back, for O0: a statement the revert changed goes on one line again
where it fits.
"""

from __future__ import annotations

import ast
import io
import itertools
import re
import textwrap
import tokenize
from collections.abc import Callable
from typing import NamedTuple

_OPENING, _CLOSING = "([{", ")]}"
_DIRECTIVE = re.compile(r"#.*\b(noqa|type:|fmt:|pragma|amprewrite:)")
_ASSIGNMENTS = {"=", "+=", "-=", "*=", "/=", "//=", "%=", "@=", "**=", ">>=", "<<=", "&=",
                "^=", "|="}
# black's delimiter priorities (linegen's `is_split_before_delimiter`): the highest splits first
_PRIORITY = {
    "for": 20, "if": 16, "else": 16, "or": 14, "and": 14,
    "<": 10, ">": 10, "==": 10, "!=": 10, "<=": 10, ">=": 10, "in": 10, "not": 10, "is": 10,
    "|": 9, "^": 8, "&": 7, "<<": 6, ">>": 6, "+": 5, "-": 5,
    "*": 4, "/": 4, "//": 4, "%": 4, "@": 4, "**": 1,
}
_OPERAND_END = (tokenize.NAME, tokenize.NUMBER, tokenize.STRING)
_KEYWORDS = {"and", "or", "not", "in", "is", "if", "else", "for", "lambda", "return", "yield",
             "await", "async", "from", "import", "assert", "del", "with", "as", "while", "elif"}
_FSTRING_START = getattr(tokenize, "FSTRING_START", None)
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)
_DEEPEST = 12  # nested splits of one line


class _Token(NamedTuple):
    kind: int
    text: str
    start: int  # offsets in the fragment
    end: int
    depth: int  # brackets open before it (an opening bracket counts the ones outside it)


def line_fitter(original: str, limit: int, unit: str) -> Callable[[str], str]:
    """What fits the rendered code of whole statements (beginning at column 0) to `limit`
    columns, `unit` an indentation: each line past it that is not `original`'s own wrapped."""
    authors: list[Callable[[str], bool]] = []  # built at the first long line

    def fit(text: str) -> str:
        lines = text.splitlines(keepends=True)
        long = [n for n, line in enumerate(lines) if _width(line) > limit]
        if not long:
            return text
        if not authors:
            authors.append(_authors_lines(original, limit))
        long = [n for n in long if not authors[0](lines[n]) and not _DIRECTIVE.search(lines[n])]
        return _fitted(lines, long, limit, unit) if long else text

    return fit


def _fitted(lines: list[str], long: list[int], limit: int, unit: str) -> str:
    """The text of `lines` with its `long` lines wrapped, where that keeps its `ast`."""
    text = "".join(lines)
    rows = _logical_rows(text)
    if rows is None:
        return text
    for n in reversed(long):  # from the end: earlier line numbers stay valid
        newline = lines[n][len(lines[n].rstrip("\r\n")):]
        code = lines[n].rstrip("\r\n")
        row = rows.get(n)
        if row is None:
            new = _fit(code, limit, unit)
        elif n > row.first and row.open > 0:
            new = _filled(code, row.tokens, limit, unit)
        else:
            continue
        if new is not None and len(new) > 1:
            lines[n:n + 1] = [line + newline for line in new]
    result = "".join(lines)
    return result if _same_program(text, result) else text


def _width(line: str) -> int:
    code = line.rstrip("\r\n")
    return len(code.expandtabs()) if "\t" in code else len(code)


def _authors_lines(original: str, limit: int) -> Callable[[str], bool]:
    """Whether a line is the author's: one of `original`'s, or one it had over the limit
    (the rewrite may have indented it)."""
    exact = set(original.splitlines())
    over = {line.strip() for line in exact if _width(line) > limit}
    return lambda line: line.rstrip("\r\n") in exact or line.strip() in over


class _Row(NamedTuple):
    """A physical line of a statement written over several lines."""

    first: int  # its statement's first and last line (0-based)
    last: int
    open: int  # the brackets open where it begins (-1: inside a string)
    tokens: list[_Token]  # its tokens, depths counted from its start


def _logical_rows(text: str) -> dict[int, _Row] | None:
    """The lines of `text` that belong to statements written over several lines."""
    rows: dict[int, _Row] = {}
    start: int | None = None
    depth = 0
    open_at: dict[int, int] = {}
    tokens: dict[int, list[_Token]] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
                continue
            row = token.start[0] - 1
            if start is None:
                if token.type == tokenize.COMMENT:
                    continue
                start = row
            open_at.setdefault(row, depth)
            for line in range(row + 1, token.end[0]):  # a string over several lines
                open_at.setdefault(line, -1)
            if token.type == tokenize.OP and token.string in _CLOSING:
                depth -= 1
            if token.type != tokenize.NEWLINE:
                tokens.setdefault(row, []).append(_Token(
                    token.type, token.string, token.start[1], token.end[1],
                    depth - open_at[row]))
            if token.type == tokenize.OP and token.string in _OPENING:
                depth += 1
            if token.type == tokenize.NEWLINE:
                if row > start:
                    for line in range(start, row + 1):
                        rows[line] = _Row(start, row, open_at.get(line, 0),
                                          tokens.get(line, []))
                start, open_at, tokens = None, {}, {}
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    return rows


def _same_program(before: str, after: str) -> bool:
    """Whether the two texts parse to the same `ast` (a wrapped line is laid out again, not
    changed)."""
    try:
        return ast.dump(ast.parse(before)) == ast.dump(ast.parse(after))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False


def _tokens(fragment: str) -> list[_Token] | None:
    """The tokens of one line of code (no newline in it), or None where it is not balanced
    code of its own."""
    tokens, depth, strings = [], 0, 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(fragment).readline):
            if token.type in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER,
                              tokenize.INDENT, tokenize.DEDENT):
                continue
            if token.start[0] != 1:
                return None
            if token.type == _FSTRING_START:
                strings += 1
            elif token.type == _FSTRING_END:
                strings -= 1
            if strings or token.type == _FSTRING_END:
                continue  # inside an f-string (Python 3.12's tokens): part of one string
            if token.type == tokenize.OP and token.string in _CLOSING:
                depth -= 1
            tokens.append(_Token(token.type, token.string, token.start[1], token.end[1], depth))
            if token.type == tokenize.OP and token.string in _OPENING:
                depth += 1
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    return tokens if depth == 0 and strings == 0 else None


def _fit(
    line: str, limit: int, unit: str, nesting: int = 0, inside: bool = False
) -> list[str] | None:
    """`line` as lines that fit `limit` where black would split it, or None; `inside`: the
    line is in brackets, where it may also split before its operators."""
    if _width(line) <= limit or nesting > _DEEPEST:
        return None
    indent = line[:len(line) - len(line.lstrip())]
    code = line.strip()
    tokens = _tokens(code)
    if not tokens or any(t.text == ";" and t.depth == 0 for t in tokens):
        return None
    operands = _operands(code, tokens) if inside else []
    if len(operands) > 1:
        return [fitted for operand in operands
                for fitted in _fit(indent + operand, limit, unit, nesting + 1, True)
                or [indent + operand]]
    names = _import_split(code, tokens)
    split = names or (None if inside else _value_split(code, tokens, len(indent), limit)) \
        or _bracket_split(code, tokens, len(indent), limit)
    if split is None:
        return None
    head, body, tail = split
    head_lines = _fit(indent + head, limit, unit, nesting + 1) or [indent + head]
    lines = [*head_lines, *_body(body, indent + unit, limit, unit, nesting, bool(names)),
             indent + tail]
    return lines if nesting or _same_statement(code, lines) else None


def _operands(code: str, tokens: list[_Token]) -> list[str]:
    """`a + b(c),` -> `a`, `+ b(c),`: a line in brackets split before its top-level
    operators of the lowest binding, or a method chain before each link (`(...)` / `.sum(1)`
    / `.mean()`); its trailing comma stays with the last."""
    end = len(tokens) - (tokens[-1].text == ",")
    delimiters = _delimiters(tokens[:end])
    if len(delimiters) == 1 and tokens[delimiters[0]].text == ".":
        return []  # one method split from its object reads wrong (black's rule too)
    bounds = [0, *(tokens[i].start for i in delimiters), len(code)]
    return [code[a:b].strip() for a, b in itertools.pairwise(bounds)]


def _same_statement(code: str, lines: list[str]) -> bool:
    """Whether `lines` are `code`, one statement or a block's header, laid out again."""
    block = "\n    pass" if _ends_header(code) else ""
    return _same_program(code + block, textwrap.dedent("\n".join(lines)) + block)


def _ends_header(code: str) -> bool:
    """Whether a line is a block's header (`with autocast():`, a comment after it)."""
    tokens = _tokens(code) or []
    while tokens and tokens[-1].kind == tokenize.COMMENT:
        tokens.pop()
    return bool(tokens) and tokens[-1].text == ":"


def _import_split(code: str, tokens: list[_Token]) -> tuple[str, str, str] | None:
    """`from m import a, b` -> `from m import (`, the names, `)`."""
    if tokens[0].text != "from":
        return None
    names = next((i for i, t in enumerate(tokens) if t.text == "import"), None)
    if names is None or names + 1 >= len(tokens) or tokens[names + 1].text in ("(", "*"):
        return None
    comment = tokens[-1] if tokens[-1].kind == tokenize.COMMENT else None
    end = comment.start if comment else len(code)
    tail = ")" + (f"  {comment.text}" if comment else "")
    body = code[tokens[names + 1].start:end].strip()
    return code[:tokens[names].end] + " (", body, tail


def _value_split(
    code: str, tokens: list[_Token], indent: int, limit: int
) -> tuple[str, str, str] | None:
    """An assignment's or `return`'s value in parentheses of its own (`x = (` / value / `)`),
    where black would not split at its last bracket instead: the value is a tuple, holds two
    operators or more (a method chain's links count: `(...).sum(1).mean()`), or one and ends
    in empty brackets (`a + b(c).mean()`), or the split at its last brackets would not fit."""
    first = _value_start(tokens)
    if first is None:
        return None
    end = len(tokens) - (tokens[-1].kind == tokenize.COMMENT)
    value = tokens[first:end]
    if len(value) < 2 or value[0].text in ("yield", "lambda") or _parenthesised(value):
        return None
    delimiters = _delimiters(value)
    empty_end = value[-1].text in _CLOSING and value[-2].text in _OPENING  # `...mean()`
    if delimiters and value[delimiters[0]].text != "." and empty_end:
        delimiters.append(len(value))  # black treats the empty brackets as a delimiter too
    if not _item_commas(value) and len(delimiters) < 2 and _trailer_split_fits(
            code, tokens, first, indent, limit):
        return None
    comment = tokens[-1].text if end < len(tokens) else ""
    tail = ")" + (f"  {comment}" if comment else "")
    return code[:value[0].start].rstrip() + " (", code[value[0].start:value[-1].end], tail


def _value_start(tokens: list[_Token]) -> int | None:
    """Where an assignment's or `return`'s value begins among a statement's tokens, or None
    for another statement."""
    top = [i for i, t in enumerate(tokens) if t.depth == 0 and t.kind == tokenize.OP
           and t.text in _ASSIGNMENTS]
    if top:
        return top[-1] + 1
    return 1 if tokens[0].text == "return" and len(tokens) > 1 else None


def _parenthesised(value: list[_Token]) -> bool:
    """Whether a value is one parenthesised expression (`(a + b)`)."""
    return value[0].text == "(" and next(
        i for i, t in enumerate(value) if i and t.depth == 0) == len(value) - 1


def _trailer_split_fits(
    code: str, tokens: list[_Token], value: int, indent: int, limit: int
) -> bool:
    """Whether the bracket split lands on a call's or subscript's brackets, on those of the
    value (`tokens[value:]`) itself (`[...]`) or on a parenthesised expression (not a tuple:
    `>= (8, 0)` reads badly split), its first and last lines within `limit`."""
    split = _bracket_split(code, tokens, indent, limit)
    if split is None or indent + max(len(split[0]), len(split[2].split("  #")[0])) > limit:
        return False
    opening = next(i for i, t in enumerate(tokens) if t.end == len(split[0]))
    inside = _tokens(split[1]) or []
    group = tokens[opening].text == "(" and not _item_commas(inside)  # `* (q_next)`
    return opening == value or _after_operand(tokens[opening - 1]) or group


def _bracket_split(
    code: str, tokens: list[_Token], indent: int, limit: int
) -> tuple[str, str, str] | None:
    """At the last top-level bracket pair whose opening line fits (black's right-hand split,
    omitting trailers), else the last one."""
    pairs = []
    for i, token in enumerate(tokens):
        if token.depth == 0 and token.text in _OPENING and token.kind == tokenize.OP:
            close = next(j for j in range(i + 1, len(tokens))
                         if tokens[j].depth == 0 and tokens[j].text in _CLOSING)
            if close > i + 1:
                pairs.append((i, close))
    if not pairs:
        return None
    chosen = next((p for p in reversed(pairs) if indent + tokens[p[0]].end <= limit), pairs[-1])
    opening, closing = tokens[chosen[0]], tokens[chosen[1]]
    tail = code[closing.start:]
    comment = tokens[-1] if tokens[-1].kind == tokenize.COMMENT else None
    if comment is not None:
        tail = code[closing.start:comment.start].rstrip() + "  " + comment.text
    return code[:opening.end], code[opening.end:closing.start].strip(), tail


def _delimiters(tokens: list[_Token]) -> list[int]:
    """The positions of the top-level delimiters of the lowest binding (black's highest
    priority) among `tokens`, one expression."""
    found: list[tuple[int, int]] = []
    target = False  # between a comprehension's `for` and its `in`
    for i, token in enumerate(tokens):
        if token.depth != 0 or token.kind not in (tokenize.OP, tokenize.NAME):
            continue
        if token.text == "for":
            target = True
        elif token.text == "in" and target:
            target = False
            continue
        if token.text == "." and i and tokens[i - 1].text in _CLOSING:
            found.append((_PRIORITY["**"], i))  # a method chain's link: `(...).sum(1)`
            continue
        priority = _PRIORITY.get(token.text)
        if priority is None or i == 0 or not _after_operand(tokens[i - 1]):
            continue  # a unary `-x`, `not x`, the start of the expression
        if token.text == "not" and (i + 1 >= len(tokens) or tokens[i + 1].text != "in"):
            continue
        if token.text == "in" and tokens[i - 1].text == "not":
            continue
        if token.text == "is" and tokens[i - 1].text == "is":
            continue
        if token.text == "if" and any(t.text == "for" and t.depth == 0 for t in tokens[:i]):
            priority = _PRIORITY["for"]  # a comprehension's condition
        found.append((priority, i))
    if any(tokens[i].text == "lambda" and t.depth == 0 for i, t in enumerate(tokens)):
        return []  # a lambda's body binds everything after it: leave it whole
    if not found:
        return []
    top = max(priority for priority, _ in found)
    return [i for priority, i in found if priority == top]


def _item_commas(tokens: list[_Token]) -> list[int]:
    """The positions of the commas separating top-level items: none in a comprehension
    (`f(x, y) for x, y in pairs`), not a lambda's between `lambda` and its colon."""
    commas, in_lambda = [], False
    for i, token in enumerate(tokens):
        if token.depth != 0:
            continue
        if token.text in ("for", "async") and token.kind == tokenize.NAME:
            return []
        if token.text == "lambda":
            in_lambda = True
        elif token.text == ":" and in_lambda:
            in_lambda = False
        elif token.text == "," and not in_lambda:
            commas.append(i)
    return commas


def _after_operand(token: _Token) -> bool:
    """Whether `token` ends an operand (so an operator after it is binary)."""
    if token.kind == tokenize.NAME:
        return token.text not in _KEYWORDS or token.text in ("None", "True", "False")
    return token.kind in _OPERAND_END or token.text in _CLOSING


def _body(
    body: str, indent: str, limit: int, unit: str, nesting: int, explode: bool = False
) -> list[str]:
    """The contents of a split bracket: on one line where they fit (unless `explode`: an
    import's names), else one item per line with a trailing comma, or one operand per line,
    each line fitted again."""
    if _width(indent + body) <= limit and not explode:
        return [indent + body]
    tokens = _tokens(body)
    if tokens is None:
        return [indent + body]
    commas = _item_commas(tokens)
    if not commas and not explode:
        return _fit(indent + body, limit, unit, nesting + 1, True) or [indent + body]
    starts = [0, *(i + 1 for i in commas)]
    items = [body[tokens[s].start:tokens[e - 1].end]
             for s, e in zip(starts, [*commas, len(tokens)], strict=True) if e > s]
    return [line for item in items
            for line in _fit(f"{indent}{item},", limit, unit, nesting + 1, True)
            or [f"{indent}{item},"]]


def _filled(line: str, tokens: list[_Token], limit: int, unit: str) -> list[str] | None:
    """A continuation line inside the author's brackets (`tokens`: its tokens, depths counted
    from the line's start), filled up to `limit` with its items, the rest on following lines
    at the same indentation; an item alone still past the limit split as `_fit` splits it."""
    indent = line[:len(line) - len(line.lstrip())]
    lowest = min((t.depth for t in tokens if t.text == "," and t.depth <= 0),
                 default=0)  # `], a=1, b=2`: the items of the bracket outside
    tokens = [t._replace(depth=t.depth - lowest) for t in tokens]
    code = [t for t in tokens if t.kind != tokenize.COMMENT]  # a comment stays at the end
    end = code[-1].end if code else 0
    cuts = [tokens[i].end for i in _item_commas(tokens) if tokens[i].end < end]
    lines, start = [], len(indent)
    for cut, following in itertools.pairwise([*cuts, len(line)]):
        if len(indent) + len(line[start:following].strip()) > limit and cut > start:
            lines.append(indent + line[start:cut].strip())
            start = cut
    lines.append(indent + line[start:].strip())
    fitted = [piece for line in lines for piece in _item_fitted(line, limit, unit)]
    return fitted if len(fitted) > 1 else None


def _item_fitted(line: str, limit: int, unit: str) -> list[str]:
    """An item of a continuation line as `_fit` splits it, with the author's closing
    brackets that end the line (`weights=f(a, b))`) after its last line."""
    code = line.rstrip()
    closing = ""
    while code and code[-1] in _CLOSING and _tokens(code.strip()) is None:
        code, closing = code[:-1].rstrip(), code[-1] + closing
    fitted = _fit(code, limit, unit, 1, True) if _tokens(code.strip()) else None
    if fitted is None:
        return [line]
    return [*fitted[:-1], fitted[-1] + closing]


def line_joiner(original: str, limit: int) -> Callable[[str], str]:
    """O0's counterpart of `line_fitter`: each statement the revert changed that is written
    over several lines goes back on one line where it fits `limit`, without the parentheses a
    wrapping added; as black, not one with a trailing comma (`f(\n    a,\n    b,\n)`)."""
    authors: list[set[tuple[str, ...]]] = []  # the original's statements over several lines

    def join(text: str) -> str:
        rows = _logical_rows(text)
        if not rows:
            return text
        if not authors:
            authors.append(_statements(original))
        lines = text.splitlines(keepends=True)
        starts = sorted({row.first for row in rows.values()}, reverse=True)
        for first in starts:
            last = rows[first].last
            span = [line.rstrip("\r\n") for line in lines[first:last + 1]]
            if tuple(span) in authors[0]:
                continue  # the author's own layout
            joined = _joined(span, [rows[n].tokens for n in range(first, last + 1)], limit)
            if joined is not None:
                newline = lines[last][len(lines[last].rstrip("\r\n")):]
                lines[first:last + 1] = [joined + newline]
        result = "".join(lines)
        return result if _same_program(text, result) else text

    return join


def _statements(text: str) -> set[tuple[str, ...]]:
    """The lines of each statement of `text` written over several lines."""
    lines = text.splitlines()
    rows = _logical_rows(text) or {}
    return {tuple(lines[row.first:row.last + 1]) for n, row in rows.items() if n == row.first}


def _joined(span: list[str], tokens: list[list[_Token]], limit: int) -> str | None:
    """The statement of lines `span` (`tokens`: each line's) on one line, where it fits
    `limit` and its only comment ends it."""
    if any(t.kind == tokenize.COMMENT for row in tokens[:-1] for t in row):
        return None
    if any(t.kind == tokenize.STRING and "\n" in t.text for row in tokens for t in row):
        return None
    flat = [t for row in tokens for t in row if t.kind != tokenize.COMMENT]
    if any(a.text == "," and b.text in _CLOSING for a, b in itertools.pairwise(flat)):
        return None  # a magic trailing comma: black keeps the statement exploded too
    indent = span[0][:len(span[0]) - len(span[0].lstrip())]
    code = span[0].strip()
    for line in span[1:]:
        piece = line.strip()
        glue = "" if code[-1] in _OPENING or piece[0] in _CLOSING + "." else " "
        code += glue + piece
    code = _without_added_parentheses(code)
    if _width(indent + code) > limit or not _same_statement(code, span):
        return None
    return indent + code


def _without_added_parentheses(code: str) -> str:
    """`x = (a + b)` -> `x = a + b`, `from m import (a)` -> `from m import a`: the
    parentheses a wrapping added."""
    tokens = _tokens(code)
    if not tokens:
        return code
    if tokens[0].text == "from":
        unwrapped = re.sub(r"\bimport \((.*)\)", r"import \1", code, count=1)
        return unwrapped if _same_statement(code, [unwrapped]) else code
    first = _value_start(tokens)
    end = len(tokens) - (tokens[-1].kind == tokenize.COMMENT)
    value = tokens[first:end] if first is not None else []
    if len(value) < 2 or value[-1].text != ")" or not _parenthesised(value):
        return code
    inner_tokens = [t._replace(depth=t.depth - 1) for t in value[1:-1]]
    if _item_commas(inner_tokens) or any(t.text == "for" and t.depth == 0
                                         for t in inner_tokens):
        return code  # a tuple or a generator: its parentheses are its own
    inner = code[value[0].end:value[-1].start].strip()
    unwrapped = code[:value[0].start] + inner + code[value[-1].end:]
    return unwrapped if _same_statement(code, [unwrapped]) else code
