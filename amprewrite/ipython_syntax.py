"""IPython syntax in notebook cells, masked for parsing and restored byte for byte.

Line magics (`%matplotlib inline`), shell escapes (`!pip install x`, `files = !ls`), magic
assignments (`t = %timeit -o f()`), help (`obj?`, `??obj`) and auto-call escapes (`/f a`,
`,f a b`, `;f a`) are not Python. Each such line, where a statement may start (not inside a
string or brackets), becomes a string-literal statement at the same indentation: inert for the
analysis, valid inside any block, one line for one line so that positions stay put. After the
rewrite each placeholder is replaced by its original line, at the placeholder's indentation (a
magic the rewrite moved into a `with` block moves with it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Cell magics whose body is Python run in the kernel's namespace: the cell is rewritten (its
# first line masked). Every other cell magic (`%%bash`, `%%writefile`, `%%python` in a
# subprocess, `%%html`, ...) makes the cell something else, left alone.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug"})

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
_CELL_MAGIC = re.compile(r"\s*%%(\w*)")
_ESCAPES = ("%", "!", "?", "/", ",", ";")  # a statement never starts with one of these
_OPERATOR_CHARS = "=!<>+-*/%&|^@:"  # before `=`, they make it `==`, `!=`, `+=`, `:=`, ...


def physical_lines(source: str) -> list[str]:
    """`source` split into lines, each with its own line ending (`\\n`, `\\r\\n` or `\\r`)."""
    return _LINE.findall(source)


def cell_magic(source: str) -> str | None:
    """The name of the cell magic on the cell's first non-blank line (`time` for `%%time`)."""
    for line in physical_lines(source):
        if line.strip():
            match = _CELL_MAGIC.match(line)
            return match[1] if match is not None and line.lstrip().startswith("%%") else None
    return None


@dataclass
class _Lexer:
    """What the lines so far leave open: brackets, a string, a backslash continuation."""

    depth: int = 0
    quote: str | None = None
    continued: bool = False

    @property
    def at_statement(self) -> bool:
        return self.depth == 0 and self.quote is None and not self.continued

    def scan(self, line: str) -> str:
        """Advance over `line`; return its code outside strings and comments."""
        code: list[str] = []
        text = line.rstrip("\r\n")
        index, comment = 0, False
        while index < len(text):
            if self.quote is not None:
                end = _string_end(text, index, self.quote)
                if end is None:
                    break
                self.quote, index = None, end
                code.append("_")
                continue
            char = text[index]
            if char == "#":
                comment = True
                break
            if char in "\"'":
                self.quote = text[index:index + 3] if text[index:index + 3] in ('"""', "'''") \
                    else char
                index += len(self.quote)
                continue
            if char in "([{":
                self.depth += 1
            elif char in ")]}":
                self.depth = max(0, self.depth - 1)
            code.append(char)
            index += 1
        escaped_end = _odd_backslashes(text)
        if self.quote is not None and len(self.quote) == 1 and not escaped_end:
            self.quote = None  # an unterminated string: Python's error to report, not ours
        self.continued = self.quote is None and not comment and escaped_end
        return "".join(code)


def _string_end(text: str, index: int, quote: str) -> int | None:
    """The index just past the closing `quote` at or after `index`, or None."""
    while index < len(text):
        if text[index] == "\\":
            index += 2
        elif text.startswith(quote, index):
            return index + len(quote)
        else:
            index += 1
    return None


def _odd_backslashes(text: str) -> bool:
    return (len(text) - len(text.rstrip("\\"))) % 2 == 1


def is_ipython(line: str, code: str) -> bool:
    """Whether a line where a statement starts is IPython syntax; `code` is its text outside
    strings and comments (help's `?` is never Python, nor is `= !` or `= %`)."""
    body = line.lstrip()
    return body.startswith(_ESCAPES) or "?" in code or _assigns_command(code)


def _assigns_command(code: str) -> bool:
    """`x = !ls`, `d["k"] = %time f()`: the first assignment `=` outside brackets is followed
    by a shell escape or a magic."""
    depth = 0
    for index, char in enumerate(code):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif (char == "=" and depth == 0 and code[index + 1:index + 2] != "="
              and (index == 0 or code[index - 1] not in _OPERATOR_CHARS)):
            return code[index + 1:].lstrip().startswith(("!", "%"))
    return False


@dataclass
class Masker:
    """Masks the IPython lines of the cells of one notebook and restores them.

    `prefix` must not occur in the notebook: placeholders are `"<prefix><n>"` statements.
    """

    prefix: str
    originals: dict[str, tuple[str, bool]] = field(default_factory=dict)  # name -> line, follows

    def mask(self, source: str) -> str:
        """`source` with every IPython line replaced by a placeholder statement."""
        lexer = _Lexer()
        masked: list[str] = []
        indent: str | None = None  # of the command whose backslash continuation this is
        for line in physical_lines(source):
            body = line.rstrip("\r\n")
            ending = line[len(body):]
            if indent is not None:  # a command's continuation line
                masked.append(self._placeholder(indent, body, follows=True) + ending)
                indent = indent if _odd_backslashes(body) else None
                continue
            if lexer.at_statement and body.strip():
                trial = _Lexer()
                code = trial.scan(body)
                if is_ipython(body, code):
                    own = body[:len(body) - len(body.lstrip())]
                    masked.append(self._placeholder(own, body, follows=False) + ending)
                    indent = own if _odd_backslashes(body) else None
                    continue
            lexer.scan(line)
            masked.append(line)
        return "".join(masked)

    def _placeholder(self, indent: str, line: str, follows: bool) -> str:
        name = f"{self.prefix}{len(self.originals)}"
        self.originals[name] = (line, follows)
        return f'{indent}"{name}"'

    def unmask(self, source: str, expected: set[str]) -> str | None:
        """`source` (masked, perhaps rewritten) with its placeholders restored; None unless it
        holds each of `expected` exactly once and no other (the rewrite must keep them)."""
        pattern = re.compile(rf'^([ \t]*)"({re.escape(self.prefix)}\d+)"[ \t]*$')
        restored: list[str] = []
        seen: set[str] = set()
        for line in physical_lines(source):
            body = line.rstrip("\r\n")
            match = pattern.match(body)
            if match is None:
                restored.append(line)
                continue
            name = match[2]
            if name in seen or name not in expected:
                return None
            seen.add(name)
            original, follows = self.originals[name]
            if not follows:  # at the placeholder's indentation, which the rewrite may change
                original = match[1] + original.lstrip(" \t")
            restored.append(original + line[len(body):])
        return "".join(restored) if seen == expected else None

    def names_in(self, source: str) -> set[str]:
        """The placeholders a masked source holds."""
        return set(re.findall(rf'"({re.escape(self.prefix)}\d+)"', source))
