"""The cheap tree walk gives libcst's own children, in the same order, less the trivia."""

from __future__ import annotations

import libcst as cst
import pytest

from amprewrite.analysis.tree import children, descendants
from tests.execution import FIXTURES_DIR

TRIVIA = (cst.BaseParenthesizableWhitespace, cst.TrailingWhitespace, cst.EmptyLine, cst.Comment,
          cst.Newline, cst.LeftParen, cst.RightParen, cst.LeftSquareBracket,
          cst.RightSquareBracket, cst.LeftCurlyBrace, cst.RightCurlyBrace, cst.Comma,
          cst.Semicolon, cst.Colon, cst.Dot, cst.AssignEqual, cst.BaseBinaryOp,
          cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseUnaryOp, cst.BaseAugOp, cst.Asynchronous,
          cst.ParamSlash)

EVERY_SHAPE = '''\
"""Docstring."""
from __future__ import annotations
from .. import sibling as s
from . import *
import os.path as p, sys

type Alias[T] = list[T]

@decorator(arg, key=1)
@other
async def f[T](a, /, b: int = 1, *args, c, d=2, **kwargs) -> T:
    global g
    nonlocal_value = [x async for x in y if x] + {k: v for k, v in z} + {*s}
    async with lock as held, other():
        await call(*a, **k)
    async for i in it:
        yield from g(i) if i else (yield i)
    del a[1:2:3], b.c
    assert a, "message"
    raise E from cause
    return lambda q, *, r=1: q @ r

class C(Base, metaclass=M):
    x: int = 1
    y += (z := f"{a!r:>{width}} {b}" "tail")

try:
    pass
except* ValueError as e:
    pass
try:
    import missing
except (ImportError, OSError) as exc:
    print(exc, sep="", end="\\n"); x = 1
else:
    x = ~-+1 if not a and b or c < d <= e is not f in g not in h else None
finally:
    pass

match command:
    case [1, *rest] if rest:
        pass
    case {"k": v, **others} | Point(x=0, y=_) as point:
        pass
    case "a" | None | -1.5j:
        pass
while True:
    break
else:
    continue_ = 1
for i, (j, k) in enumerate(pairs):
    continue
x[::2], x[a, b:c], x[...] = 1, 2, 3
'''


def _check(module: cst.Module) -> int:
    """Compare every node reached by `children` with libcst; the number of nodes checked."""
    checked = 0
    for node in descendants(module):
        expected = [child for child in node.children if not isinstance(child, TRIVIA)]
        assert children(node) == expected, type(node).__name__
        checked += 1
    return checked


def test_every_shape_of_python_syntax() -> None:
    module = cst.parse_module(EVERY_SHAPE)
    assert _check(module) > 300
    kinds = {type(node) for node in descendants(module)}
    assert {cst.Match, cst.MatchAs, cst.TypeAlias, cst.ExceptStarHandler, cst.Lambda,
            cst.FormattedString, cst.NamedExpr, cst.IfExp, cst.Decorator} <= kinds


@pytest.mark.parametrize("path", sorted(FIXTURES_DIR.glob("*/*.py")), ids=str)
def test_every_fixture(path) -> None:
    _check(cst.parse_module(path.read_bytes()))


def test_trivia_is_left_out() -> None:
    module = cst.parse_module("f(a,  # comment\n  b)  # end\n")
    assert not any(isinstance(node, TRIVIA) for node in descendants(module))
    names = [node.value for node in descendants(module) if isinstance(node, cst.Name)]
    assert sorted(names) == ["a", "b", "f"]
