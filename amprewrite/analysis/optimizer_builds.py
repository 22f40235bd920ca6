"""Where each stepped optimizer is built, and which models' parameters it receives."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amprewrite.analysis.facts import Binding, ModuleFacts
from amprewrite.analysis.kinds import Kind, KindTable, kind_from_name, parameter_owners
from amprewrite.analysis.sites import StepSite


@dataclass(frozen=True)
class OptimizerBuild:
    """Where a stepped optimizer is built, and which models it trains."""

    binding: Binding  # `optimizer = torch.optim.SGD(model.parameters(), ...)`
    optimizer: str  # the optimizer's key
    models: tuple[str, ...]  # keys whose `.parameters()` reach it; empty: unknown


def optimizer_builds(
    facts: ModuleFacts, steps: list[StepSite], passed: frozenset[str] = frozenset()
) -> list[OptimizerBuild]:
    """Builds of the optimizers `steps` step, and of those `passed` to another module that
    steps them (a project's links)."""
    stepped = {s.key for s in steps} | passed
    aliased = _aliased(facts, stepped)
    builds = []
    for binding in facts.bindings:
        if len(binding.keys) != 1 or not (
                binding.keys[0] in stepped or (binding.function, binding.keys[0]) in aliased):
            continue
        if not isinstance(binding.value, cst.Call):
            continue  # `opt = optimizer` aliases are not builds
        owners = tuple(dict.fromkeys(parameter_owners(binding.value)))
        builds.append(OptimizerBuild(binding, binding.keys[0], owners))
    return builds


def held_builds(
    facts: ModuleFacts, kinds: KindTable, cls: cst.ClassDef, optimizers: frozenset[str]
) -> list[OptimizerBuild]:
    """`self.optimizer = optimizer` in `cls.__init__`: an optimizer built elsewhere that the
    class holds (for its subclasses to step), with the models it holds (`self.model`) as the
    ones it trains."""
    init_bindings = [b for b in facts.init_bindings(cls) if len(b.keys) == 1]
    models = tuple(b.keys[0] for b in init_bindings if b.keys[0].startswith("self.") and (
        kinds.of(b.keys[0]) or kind_from_name(b.keys[0], (Kind.MODEL,))) is Kind.MODEL)
    return [OptimizerBuild(b, b.keys[0], models) for b in init_bindings
            if b.keys[0] in optimizers]


def _aliased(facts: ModuleFacts, stepped: set[str | None]) -> set[tuple[object, str]]:
    """(function, name) of the locals a stepped optimizer is assigned from there:
    `optimizer` in `self.model, self.optimizer = model, optimizer` (the local's build is the
    stepped optimizer's)."""
    found: set[tuple[object, str]] = set()
    for binding in facts.bindings:
        value = binding.value
        values = ([e.value for e in value.elements] if isinstance(value, cst.Tuple | cst.List)
                  and len(value.elements) == len(binding.keys) else [value])
        if len(values) != len(binding.keys):
            continue
        for key, source in zip(binding.keys, values, strict=True):
            if key in stepped and isinstance(source, cst.Name):
                found.add((binding.function, source.value))
    return found
