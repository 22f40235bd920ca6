"""The checker's entry point: a module's protocol violations."""

from __future__ import annotations

import ast

from amprewrite.protocol.builder import build
from amprewrite.protocol.interpreter import Interpreter
from amprewrite.protocol.invariants import Violation
from amprewrite.protocol.program import program_of


def violations(tree: ast.Module, source: str) -> list[Violation]:
    """Every invariant `tree` (parsed from `source`) breaks on a path the checker can see."""
    program = program_of(tree, source)
    build(program)
    return Interpreter(program).check()
