"""Definite assignment: is a name bound on every path reaching a statement?"""

from __future__ import annotations

import libcst as cst
import pytest

from amprewrite.analysis.definite_binding import bound_on_every_path
from amprewrite.analysis.facts import collect

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
