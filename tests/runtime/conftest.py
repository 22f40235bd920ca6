"""Every runtime test starts from a clean policy (no cached environment, no known device)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from amprewrite_runtime import policy


@pytest.fixture(autouse=True)
def clean_policy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for variable in (policy.ENV_OPT_LEVEL, policy.ENV_DTYPE, policy.ENV_DEVICE):
        monkeypatch.delenv(variable, raising=False)
    policy.reset_policy()
    yield
    policy.reset_policy()
