"""Shared pytest configuration."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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


# The execution tests train rewritten scripts on the CPU: the slow tier (CI runs it, with
# `pytest -q -m "slow or not slow" -n 2 --dist loadfile`). These few stay in the default
# tier as representatives: a fixture trained in both dtypes, the overflow a float16 run must
# skip, inference, a migration.
FAST_EXECUTIONS = frozenset({
    "tests/test_execute.py::test_rewrite_trains_in_low_precision_like_fp32"
    "[mnist_functions-O1-torch.bfloat16]",
    "tests/test_execute.py::test_rewrite_trains_in_low_precision_like_fp32"
    "[mnist_functions-O1-torch.float16]",
    "tests/test_execute.py::test_rewrite_survives_an_overflow_in_float16[mnist_functions-O1]",
    "tests/test_execute.py::test_inference_only_script_autocasts_without_a_scaler"
    "[torch.bfloat16]",
    "tests/test_execute.py::test_migrated_torch_cuda_amp_script_runs_on_the_cpu_without_"
    "deprecation",
})


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(item.path).name.startswith("test_execute") and item.nodeid not in FAST_EXECUTIONS:
            item.add_marker(pytest.mark.slow)
