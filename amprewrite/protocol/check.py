"""The checker's entry point: a module's protocol violations."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from amprewrite.protocol.builder import build
from amprewrite.protocol.interpreter import Interpreter
from amprewrite.protocol.invariants import Violation
from amprewrite.protocol.program import program_of


def violations(tree: ast.Module, source: str) -> list[Violation]:
    """Every invariant `tree` (parsed from `source`) breaks on a path the checker can see."""
    program = program_of(tree, source)
    build(program)
    return Interpreter(program).check()


@dataclass(frozen=True)
class Reading:
    """A program as the checker reads it: its violations, and each event site's scaler
    values (`Interpreter.observed`; a site no path reaches is not there)."""

    violations: list[Violation]
    observed: dict[tuple[int, int], dict[str, frozenset[str]]]
    fed: dict[tuple[int, int], set[tuple[int, int]]]  # step -> the unscaled backwards it applies
    plain_steps: set[tuple[int, int]]  # the steps of `fed` not through a scaler


def read_program(tree: ast.Module, source: str) -> Reading:
    program = program_of(tree, source)
    build(program)
    interpreter = Interpreter(program, observe=True)
    found = interpreter.check()
    return Reading(found, interpreter.observed, interpreter.fed, interpreter.plain_steps)
