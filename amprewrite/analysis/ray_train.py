"""Ray Train's deprecated AMP helpers: `accelerate(amp=True)`, `prepare_optimizer`,
`backward(loss)` (from `ray.train.torch`), which explicit native AMP replaces."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts, Statement

_PREFIX = "ray.train.torch."


@dataclass
class RayAmp:
    """Ray Train's deprecated AMP helpers in a module, to migrate."""

    accelerate: list[Statement] = field(default_factory=list)  # `train.torch.accelerate(amp=...)`
    prepare_optimizer: list[tuple[Statement, cst.Call]] = field(default_factory=list)
    backward: list[cst.Call] = field(default_factory=list)  # `train.torch.backward(loss)`

    def __bool__(self) -> bool:
        return bool(self.accelerate or self.prepare_optimizer or self.backward)


def ray_amp(facts: ModuleFacts) -> RayAmp:
    found = RayAmp()
    for site in facts.calls:
        name = facts.imports.resolve(site.call.func) or ""
        if not name.startswith(_PREFIX):
            continue
        function = name.removeprefix(_PREFIX)
        if function == "accelerate":
            found.accelerate.append(site.statement)
        elif function == "prepare_optimizer" and site.call.args:
            found.prepare_optimizer.append((site.statement, site.call))
        elif function == "backward" and site.call.args:
            found.backward.append(site.call)
    return found
