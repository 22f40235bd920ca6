"""Definite assignment: is a name bound on every path reaching a statement?"""

from __future__ import annotations

import libcst as cst
import pytest

from amprewrite.analysis.definite_binding import bound_on_every_path, bound_under_same_test
from amprewrite.analysis.facts import collect
from amprewrite.analysis.sites import guards_of

CASES = {
    "if/elif/else all bind": (
        "if a:\n    opt = 1\nelif b:\n    opt = 2\nelse:\n    opt = 3\nUSE\n", True),
    "else raises": ("if a:\n    opt = 1\nelse:\n    raise ValueError\nUSE\n", True),
    "lone if": ("if a:\n    opt = 1\nUSE\n", False),
    "elif without else": ("if a:\n    opt = 1\nelif b:\n    opt = 2\nUSE\n", False),
    "loop body": ("for i in x:\n    opt = 1\nUSE\n", False),
    "try with binding handler": (
        "try:\n    opt = 1\nexcept E:\n    opt = 2\nUSE\n", True),
    "try with silent handler": ("try:\n    opt = 1\nexcept E:\n    pass\nUSE\n", False),
    "with block": ("with ctx():\n    opt = 1\nUSE\n", True),
    "plain": ("opt = 1\nUSE\n", True),
    "inside a loop after binding": ("opt = 1\nfor i in x:\n    USE\n", True),
    "annotation without value": ("opt: int\nUSE\n", False),
}


@pytest.mark.parametrize("name", CASES)
def test_bound_on_every_path(name: str) -> None:
    source, expected = CASES[name]
    module = cst.parse_module(source.replace("USE", "opt.step()"))
    facts = collect(module)
    use = next(site.statement for site in facts.calls if isinstance(site.call.func, cst.Attribute)
               and site.call.func.attr.value == "step")
    assert bound_on_every_path("opt", use, facts) is expected


SAME_TEST = {
    "same test": ("if args.autotune:\n    opt = 1\nfor i in x:\n    if args.autotune:\n"
                  "        USE\n", True),
    "same test, nested deeper": ("if args.tune:\n    opt = 1\nfor i in x:\n    if i:\n"
                                 "        if args.tune:\n            USE\n", True),
    "another test": ("if args.a:\n    opt = 1\nif args.b:\n    USE\n", False),
    "test rebound after": ("if args.a:\n    opt = 1\nargs.a = True\nif args.a:\n    USE\n",
                           False),
    "test with a call": ("if random() < 0.5:\n    opt = 1\nif random() < 0.5:\n    USE\n",
                         False),
    "binding inside a branch of its if": (
        "if args.a:\n    if b:\n        opt = 1\nif args.a:\n    USE\n", False),
    "binder after the use": ("for i in x:\n    if flag:\n        USE\n    if flag:\n"
                             "        opt = 1\n", False),
    "loop variable in the test": ("for i in x:\n    if i % 2:\n        opt = 1\n"
                                  "    if i % 2:\n        USE\n", True),
    "module test, function use": ("if args.a:\n    opt = 1\ndef f():\n    if args.a:\n"
                                  "        USE\n", True),
    "function parameter shadows the test": (
        "if args.a:\n    opt = 1\ndef f(args):\n    if args.a:\n        USE\n", False),
    "nested function reads its outer function's names": (
        "def main():\n    args = parse()\n    def step():\n        if args.a:\n"
        "            USE\nif args.a:\n    opt = 1\n", False),
}


@pytest.mark.parametrize("name", SAME_TEST)
def test_bound_under_same_test(name: str) -> None:
    source, expected = SAME_TEST[name]
    facts = collect(cst.parse_module(source.replace("USE", "opt.step()")))
    use = next(site.statement for site in facts.calls if isinstance(site.call.func, cst.Attribute)
               and site.call.func.attr.value == "step")
    assert bound_under_same_test("opt", use, guards_of(use, facts), facts) is expected
