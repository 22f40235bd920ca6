"""Where each stepped optimizer is built, and which models' parameters it receives."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amprewrite.analysis.facts import Binding, CallSite, ModuleFacts
from amprewrite.analysis.kinds import parameter_owners
from amprewrite.analysis.names import receiver_key


@dataclass(frozen=True)
class OptimizerBuild:
    """Where a stepped optimizer is built, and which models it trains."""

    binding: Binding  # `optimizer = torch.optim.SGD(model.parameters(), ...)`
    optimizer: str  # the optimizer's key
    models: tuple[str, ...]  # keys whose `.parameters()` reach it; empty: unknown


def optimizer_builds(
    facts: ModuleFacts, steps: list[CallSite], passed: frozenset[str] = frozenset()
) -> list[OptimizerBuild]:
    """Builds of the optimizers `steps` step, and of those `passed` to another module that
    steps them (a project's links)."""
    stepped = {receiver_key(s.call.func.value) for s in steps} | passed  # type: ignore[attr-defined]
    builds = []
    for binding in facts.bindings:
        if len(binding.keys) != 1 or binding.keys[0] not in stepped:
            continue
        if not isinstance(binding.value, cst.Call):
            continue  # `opt = optimizer` aliases are not builds
        owners = tuple(dict.fromkeys(parameter_owners(binding.value)))
        builds.append(OptimizerBuild(binding, binding.keys[0], owners))
    return builds
