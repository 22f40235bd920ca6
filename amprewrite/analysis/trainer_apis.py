"""Trainer APIs that run the step themselves and take a grad scaler: Determined's
`PyTorchTrial` and Enchanter's runners (both described in amprewrite's seed documents)."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis.evaluation import analyse_evaluation
from amprewrite.analysis.facts import Binding, CallSite, ModuleFacts
from amprewrite.analysis.kinds import KindTable
from amprewrite.analysis.names import dotted, iter_keys
from amprewrite.analysis.training_step import Region, merge_regions, region_before

_TRAIN_HOOKS = {"determined": ("train_batch",), "enchanter": ("train_step",)}
_EVAL_HOOKS = {"determined": ("evaluate_batch", "evaluate_full_dataset"),
               "enchanter": ("val_step", "test_step")}


@dataclass
class TrainerClass:
    """A Determined trial or Enchanter runner class and its training-step calls."""

    api: str  # "determined" or "enchanter"
    cls: cst.ClassDef
    init: cst.FunctionDef | None
    context: str | None = None  # Determined: `__init__`'s context parameter
    backwards: list[CallSite] = field(default_factory=list)  # `self.context.backward(loss)`
    steps: list[CallSite] = field(default_factory=list)  # `self.context.step_optimizer(opt)`
    regions: list[Region] = field(default_factory=list)  # forward + loss, training
    eval_regions: list[Region] = field(default_factory=list)


@dataclass
class TrainerApis:
    """The trainer classes and runners of a module that take a grad scaler."""

    classes: list[TrainerClass] = field(default_factory=list)
    runners: list[Binding] = field(default_factory=list)  # `runner = ClassificationRunner(...)`

    def __bool__(self) -> bool:
        return bool(self.classes or self.runners)


def trainer_apis(facts: ModuleFacts, kinds: KindTable) -> TrainerApis:
    found = TrainerApis()
    for cls in facts.classes:
        api = _api_of(cls, facts)
        if api is not None:
            found.classes.append(_trainer_class(api, cls, facts, kinds))
    for binding in facts.bindings:
        if isinstance(binding.value, cst.Call) and len(binding.keys) == 1:
            name = facts.imports.resolve(binding.value.func) or ""
            if name.startswith("enchanter.") and name.endswith("Runner"):
                found.runners.append(binding)
    return found


def _api_of(cls: cst.ClassDef, facts: ModuleFacts) -> str | None:
    for base in cls.bases:
        name = facts.imports.resolve(base.value) or ""
        if name == "determined.pytorch.PyTorchTrial":
            return "determined"
        if name.startswith("enchanter.") and name.endswith("Runner"):
            return "enchanter"
    return None


def _trainer_class(
    api: str, cls: cst.ClassDef, facts: ModuleFacts, kinds: KindTable
) -> TrainerClass:
    methods = {f.name.value: f for f in facts.functions if facts.function_class.get(f) is cls}
    init = methods.get("__init__")
    found = TrainerClass(api, cls, init)
    if init is not None and len(init.params.params) > 1:
        found.context = init.params.params[1].name.value
    train = {methods[name] for name in _TRAIN_HOOKS[api] if name in methods}
    regions: list[Region] = []
    for site in facts.calls:
        if site.function not in train or not isinstance(site.call.func, cst.Attribute):
            continue
        method = site.call.func.attr.value
        owner = dotted(site.call.func.value) or ""
        if api == "determined" and owner.endswith("context") and site.call.args:
            if method == "backward":
                found.backwards.append(site)
                loss = site.call.args[0].value
                regions.append(region_before(site.statement, set(iter_keys(loss)), facts, kinds))
            elif method == "step_optimizer":
                found.steps.append(site)
    if api == "enchanter":
        regions.extend(_returned_loss_regions(train, facts, kinds))
    found.regions = merge_regions([r for r in regions if r is not None], facts)
    evaluation = frozenset(methods[name] for name in _EVAL_HOOKS[api] if name in methods)
    found.eval_regions = analyse_evaluation(facts, kinds, found.regions, evaluation)
    found.eval_regions = [r for r in found.eval_regions
                          if facts.statements[r.block.body[r.start]].function in evaluation]
    return found


def _returned_loss_regions(
    functions: set[cst.FunctionDef], facts: ModuleFacts, kinds: KindTable
) -> list[Region | None]:
    """Enchanter's `train_step` returns `{"loss": loss}`: the region computes what it returns."""
    regions: list[Region | None] = []
    for statement, info in facts.statements.items():
        if info.function in functions and isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Return) and small.value is not None:
                    needed = set(iter_keys(small.value))
                    regions.append(region_before(statement, needed, facts, kinds))
    return regions
