"""Frameworks that own precision: the right rewrite is their own switch, not a scaler."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts

# Constructor -> (keyword that switches mixed precision, value per dtype).
_SWITCHES = {
    "accelerate.Accelerator": ("mixed_precision", {"float16": '"fp16"', "bfloat16": '"bf16"'}),
    "lightning.Trainer": ("precision", {"float16": '"16-mixed"', "bfloat16": '"bf16-mixed"'}),
    "lightning.pytorch.Trainer": ("precision", {"float16": '"16-mixed"',
                                                "bfloat16": '"bf16-mixed"'}),
    "pytorch_lightning.Trainer": ("precision", {"float16": '"16-mixed"',
                                                "bfloat16": '"bf16-mixed"'}),
    "lightning.Fabric": ("precision", {"float16": '"16-mixed"', "bfloat16": '"bf16-mixed"'}),
    "lightning.fabric.Fabric": ("precision", {"float16": '"16-mixed"',
                                              "bfloat16": '"bf16-mixed"'}),
}
_FRAMEWORK_MODULES = ("accelerate", "lightning", "pytorch_lightning")


@dataclass(frozen=True)
class PrecisionSwitch:
    """A framework constructor whose precision argument turns mixed precision on."""

    call: cst.Call  # `Accelerator(...)`, `Trainer(...)`, `Fabric(...)`
    framework: str  # its qualified name
    keyword: str
    values: dict[str, str]  # dtype -> value
    current: cst.BaseExpression | None  # the value already passed, if any


def precision_switches(facts: ModuleFacts) -> list[PrecisionSwitch]:
    switches = []
    for site in facts.calls:
        name = facts.imports.resolve(site.call.func)
        if name in _SWITCHES:
            keyword, values = _SWITCHES[name]
            current = next((a.value for a in site.call.args
                            if a.keyword is not None and a.keyword.value == keyword), None)
            switches.append(PrecisionSwitch(site.call, name, keyword, values, current))
    return switches


def framework_owns_precision(facts: ModuleFacts) -> str | None:
    """The framework the module trains with, when one owns the training step's precision."""
    for target in facts.imports.aliases.values():
        top = target.split(".", 1)[0]
        if top in _FRAMEWORK_MODULES:
            return top
    return None
