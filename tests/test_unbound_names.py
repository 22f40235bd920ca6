"""The unbound-name check reads the symbol tables of the top-level statements a rewrite
changed only; what it cannot tell from them it leaves to the whole program's (None)."""

from __future__ import annotations

import ast

import pytest

from amprewrite.protocol.names import new_unbound_names, unbound_names
from amprewrite.protocol.unchanged import TopLevel, rendered

BEFORE = """\
import torch
from apex import amp


def helper(x):
    return amp.scale(x)


def train(model, optimizer):
    loss = model(1)
    loss.backward()
    optimizer.step()
"""


def _top_level(text: str) -> TopLevel:
    lines = text.splitlines(keepends=True)
    starts = [sum(len(line) for line in lines[: i]) for i in range(len(lines) + 1)]
    tree = ast.parse(text)
    return TopLevel(text, [(starts[s.lineno - 1], starts[s.end_lineno or s.lineno])
                           for s in tree.body])


def _new(after: str) -> set[tuple[str, str]] | None:
    tree = ast.parse(after)
    return new_unbound_names(_top_level(BEFORE), rendered(tree, after), after, tree)


def test_a_change_binding_what_it_reads_adds_nothing() -> None:
    after = BEFORE.replace("    loss.backward()", "    scaler = torch.amp.GradScaler()\n"
                           "    scaler.scale(loss).backward()")
    assert _new(after) == set()


def test_a_read_nothing_binds_is_left_to_the_whole_program() -> None:
    after = BEFORE.replace("    loss.backward()", "    scaler.scale(loss).backward()")
    assert _new(after) is None
    assert unbound_names(after) == {("train", "scaler")}


def test_a_read_an_unchanged_statement_binds_is_bound() -> None:
    after = BEFORE.replace("    loss.backward()", "    helper(loss).backward()")
    assert _new(after) == set()


def test_a_binding_taken_out_while_its_name_is_still_read_asks_the_whole_program() -> None:
    after = BEFORE.replace("from apex import amp\n", "")
    assert _new(after) is None  # `helper` still reads `amp`
    assert _new(after.replace("amp.scale(x)", "x")) == set()


@pytest.mark.parametrize("extra", ["def f():\n    global g\n    g = 1\n",
                                   "if (n := 3):\n    pass\n"])
def test_globals_and_assignment_expressions_ask_the_whole_program(extra: str) -> None:
    assert _new(BEFORE + extra) is None
