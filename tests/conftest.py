"""Shared pytest configuration."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.rule_codes import rules_checked


@pytest.fixture(autouse=True, scope="session")
def _rules_emit_only_their_codes() -> Iterator[None]:
    """Every in-process rewrite of the session checks that a rule emits only its own codes
    (tests/rule_codes.py)."""
    with rules_checked():
        yield


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-fixtures",
        action="store_true",
        help="write the codemod's current output over fixtures/*/expected_* (review the diff!)",
    )
