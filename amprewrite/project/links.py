"""How the grad scaler crosses modules: who creates it, who receives it, who passes it.

An expert threads the one scaler from where the optimizer is built to every function that
steps, saves or restores that optimizer in another module:

- a module-level function that uses an optimizer it receives as a parameter gets a new
  parameter `scaler=None` (a new scaler when a caller passes none), and every call of it
  from another module of the group passes `scaler=<the caller's scaler>`;
- a class whose `__init__` receives the optimizer gets the parameter on `__init__` and keeps
  the scaler as `self.scaler`; constructing it passes the scaler;
- a caller that itself received the optimizer as a parameter receives the scaler the same
  way (a chain of modules), else it creates the scaler, next to the optimizer;
- a subclass stepping the optimizer its base class (in another module) stores uses the
  base's `self.scaler`, which the base creates in `__init__` next to the optimizer (before a
  resume there restores it), and saves and restores with its checkpoints.

Only what the engine will do is linked: the callee's scaler uses come from its own analysis,
the same facts the rewrite acts on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from amprewrite.analysis import ModuleAnalysis
from amprewrite.analysis.facts import CallSite, ModuleFacts
from amprewrite.analysis.kinds import KindTable
from amprewrite.analysis.names import FreshNames, dotted, receiver_key
from amprewrite.analysis.scaler_home import SCALER_NAMES
from amprewrite.project.program import Program


@dataclass(frozen=True)
class ScalerParameter:
    """A function (or a class's `__init__`) given the scaler as a new parameter."""

    function: cst.FunctionDef
    name: str
    owner: str  # `train_one_epoch` or `Trainer`, for messages
    callers: tuple[str, ...]  # display paths of the modules calling it


@dataclass(frozen=True)
class ScalerPass:
    """A call into another module that passes the scaler: `f(..., scaler=scaler)`."""

    site: CallSite
    optimizers: tuple[str, ...]  # the optimizers the call passes (their keys)
    keyword: str  # the callee's parameter
    callee: str  # `train_one_epoch`
    callee_path: str  # its module's display path


@dataclass(frozen=True)
class BaseClassHome:
    """A base class that creates the scaler its subclasses in other modules use."""

    cls: cst.ClassDef
    optimizers: frozenset[str]  # the attributes holding the optimizers (`self.optimizer`)


@dataclass(frozen=True)
class InheritedScaler:
    """A class using the scaler its base class creates, in another module."""

    cls: cst.ClassDef
    expression: str  # `self.scaler`
    base: str  # `BaseTrainer`
    base_path: str  # its module's display path


@dataclass
class ModuleLinks:
    """What the project decided for one module."""

    parameters: list[ScalerParameter] = field(default_factory=list)
    passes: list[ScalerPass] = field(default_factory=list)
    base_home: BaseClassHome | None = None
    inherited: InheritedScaler | None = None

    @property
    def receives_in_class(self) -> bool:
        return any(p.function.name.value == "__init__" for p in self.parameters)

    def __bool__(self) -> bool:
        return bool(self.parameters or self.passes or self.base_home or self.inherited)


@dataclass
class LinkedModule:
    """One module of a group: where it is, its analysis and what links it."""

    path: Path
    shown: str  # as the user sees it
    analysis: ModuleAnalysis
    links: ModuleLinks = field(default_factory=ModuleLinks)

    @property
    def scaler_name(self) -> str:
        """The name the module's rewrite gives the scaler (what its recipe will choose)."""
        return FreshNames(set(self.analysis.facts.names)).fresh(SCALER_NAMES)


def link_group(modules: list[LinkedModule], program: Program) -> None:
    """Fill in each module's links: receivers first, then the calls that reach them, until
    callers that receive their optimizer themselves are linked in turn."""
    by_path = {module.path: module for module in modules}
    calls = {module.path: _project_calls(module, program, by_path) for module in modules}
    receivers: dict[tuple[Path, str], ScalerParameter] = {}
    passes: dict[int, tuple[LinkedModule, ScalerPass]] = {}
    for _ in range(len(modules) + 1):  # each round may link one more module of a chain
        changed = False
        for module in modules:
            passing = [p.site for m, p in passes.values() if m is module]
            for owner, function, optimizers in _receiving(module, passing):
                key = (module.path, owner)
                callers = [(m, site) for m in modules if m is not module
                           for site, target in calls[m.path] if target == key
                           and _binds(site.call, function, optimizers, module.analysis.facts)]
                if key in receivers or not callers:
                    continue
                name = module.scaler_name
                receivers[key] = ScalerParameter(
                    function, name, owner, tuple(sorted({m.shown for m, _ in callers})))
                for caller, site in callers:
                    optimizers = tuple(passed_optimizers(site, caller.analysis.kinds))
                    passes[id(site.call)] = (caller, ScalerPass(site, optimizers, name, owner,
                                                                module.shown))
                changed = True
        if not changed:
            break
    for (path, _), parameter in receivers.items():
        by_path[path].links.parameters.append(parameter)
    for module, scaler_pass in passes.values():
        module.links.passes.append(scaler_pass)
    for module in modules:
        if not module.links:
            _link_to_base_class(module, program, by_path)


def _link_to_base_class(
    module: LinkedModule, program: Program, by_path: dict[Path, LinkedModule]
) -> None:
    """A class whose every scaler use steps an optimizer its base class (another module's)
    stores: the base creates `self.scaler`, the subclass uses it."""
    facts = module.analysis.facts
    sites = _scaler_sites(module.analysis)
    classes = {facts.function_class.get(s.function) for s, _ in sites if s.function}
    if not sites or len(classes) != 1 or None in classes or any(s.function is None
                                                                for s, _ in sites):
        return
    cls = classes.pop()
    assert cls is not None
    for base in cls.bases:
        qualified = facts.imports.resolve_in_project(base.value)
        target = program.resolve(module.path, qualified) if qualified else None
        parent = by_path.get(target[0]) if target is not None else None
        if target is None or parent is None or parent is module or parent.links:
            continue
        parent_facts = parent.analysis.facts
        base_cls = next((c for c in parent_facts.classes if c.name.value == target[1]
                         and c in parent_facts.module.body), None)
        if base_cls is None:
            continue
        stored = _assigned_in_init(parent_facts, base_cls)
        keys = {key for _, key in sites}
        registries = _registered(facts, cls, keys - stored, parent_facts, base_cls, stored)
        parent_sites = _scaler_sites(parent.analysis)
        if None in keys or not keys <= stored | set(registries) or not all(
                s.function is not None and parent_facts.function_class.get(s.function) is base_cls
                for s, _ in parent_sites):
            continue
        name = parent.scaler_name
        held = {k for k in keys if k in stored} | set(registries.values())
        parent.links.base_home = BaseClassHome(base_cls, frozenset(k for k in held if k))
        module.links.inherited = InheritedScaler(cls, f"self.{name}", base_cls.name.value,
                                                 parent.shown)
        return


def _registered(
    facts: ModuleFacts, cls: cst.ClassDef, keys: set[str | None], base_facts: ModuleFacts,
    base: cst.ClassDef, stored: set[str | None],
) -> dict[str | None, str]:
    """The optimizers of `keys` that `cls` hands to a method of its base class storing its
    argument into a registry the base's `__init__` creates (`self.register("model",
    self.model, self.optimizer)`, which sets `self.optimizers[name] = optimizer`), each with
    that registry: the base's checkpoints save and restore them from it."""
    found: dict[str | None, str] = {}
    for site in facts.calls:
        name = dotted(site.call.func) or ""
        method = base_facts.method(base, name.removeprefix("self.")) if name.startswith(
            "self.") and facts.function_class.get(site.function) is cls else None  # type: ignore[arg-type]
        if method is None:
            continue
        positional, _ = base_facts.parameters(method)
        for index, arg in enumerate(site.call.args):
            key = receiver_key(arg.value)
            if key not in keys or arg.star:
                continue
            parameter = arg.keyword.value if arg.keyword is not None else (
                positional[index] if index < len(positional) else None)
            registry = _stored_into(base_facts, method, parameter, stored)
            if registry is not None:
                found[key] = registry
    return found


def _stored_into(
    facts: ModuleFacts, method: cst.FunctionDef, parameter: str | None,
    stored: set[str | None],
) -> str | None:
    """The registry `self.C` (assigned in `__init__`) that `method` stores `parameter` into:
    `self.C[key] = parameter`."""
    for binding in facts.bindings:
        if (binding.function is method and isinstance(binding.value, cst.Name)
                and binding.value.value == parameter):
            for key in binding.keys:
                if key in stored and _subscript_target(binding.statement, key):
                    return key
    return None


def _subscript_target(statement: cst.CSTNode, key: str) -> bool:
    """`statement` assigns an item of `key` (`self.optimizers[name] = ...`)."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    return any(isinstance(small, cst.Assign) and any(
        isinstance(t.target, cst.Subscript) and receiver_key(t.target.value) == key
        for t in small.targets) for small in statement.body)


def _assigned_in_init(facts: ModuleFacts, cls: cst.ClassDef) -> set[str | None]:
    """The `self.` attributes `cls.__init__` assigns (none when its body is on the `def`
    line: the scaler could not be created there)."""
    init = facts.init_of(cls)
    if init is None or not isinstance(init.body, cst.IndentedBlock):
        return set()
    return {key for binding in facts.init_bindings(cls) for key in binding.keys
            if key.startswith("self.")}


def _scaler_sites(analysis: ModuleAnalysis) -> list[tuple[CallSite, str | None]]:
    """Where the module's rewrite uses the scaler, with the optimizer each site concerns:
    optimizer steps, and checkpoint saves and restores of an optimizer's state."""
    sites: list[tuple[CallSite, str | None]] = []
    training = analysis.training
    if training.found and not training.refused:
        sites += [(s, s.key) for s in training.steps]
    for saved in analysis.checkpoints.saved:
        sites.append((saved.site, _saved_optimizer(saved.entry)))
    for restored in analysis.checkpoints.restored:
        sites.append((restored.site, restored.optimizer))
    return sites


def _saved_optimizer(entry: cst.CSTNode) -> str | None:
    """`optimizer` of a saved `optimizer.state_dict()` entry, or of the optimizer pickled
    itself (`"optimizer": optimizer`)."""
    value = getattr(entry, "value", None)
    if isinstance(entry, cst.SimpleStatementLine):
        value = getattr(entry.body[0], "value", None)
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
        return receiver_key(value.func.value)
    return receiver_key(value) if isinstance(value, cst.Name | cst.Attribute) else None


def _receiving(
    module: LinkedModule, passing: list[CallSite]
) -> list[tuple[str, cst.FunctionDef, set[str]]]:
    """Module-level functions using an optimizer they receive as a parameter, and classes
    whose `__init__` receives the optimizer their methods use: the owner's name, the function
    given the scaler, and its parameters that carry the optimizer."""
    facts = module.analysis.facts
    kinds = module.analysis.kinds
    used: list[tuple[cst.FunctionDef | None, str | None]] = [
        (site.function, key) for site, key in _scaler_sites(module.analysis)]
    for site in passing:
        used += [(site.function, key) for key in passed_optimizers(site, kinds)]
    found: dict[str, tuple[cst.FunctionDef, set[str]]] = {}
    for function, key in used:
        if function is None or key is None:
            continue
        cls = facts.function_class.get(function)
        if cls is None:
            positional, keyword_only = facts.parameters(function)
            if key in positional + keyword_only and _at_module_level(facts, function):
                found.setdefault(function.name.value, (function, set()))[1].add(key)
        else:
            parameter = facts.stored_parameters(cls).get(key)
            init = facts.init_of(cls)
            if parameter is not None and init is not None and _at_module_level(facts, cls):
                found.setdefault(cls.name.value, (init, set()))[1].add(parameter)
    classes = [owner for owner, (init, _) in found.items() if init.name.value == "__init__"
               and init in facts.function_class]
    if classes and not _only_in(facts, classes, used, len(found)):
        return []  # `self.scaler` and a parameter cannot both name the one scaler here
    return [(owner, function, keys) for owner, (function, keys) in found.items()]


def _binds(call: cst.Call, function: cst.FunctionDef, parameters: set[str],
           facts: ModuleFacts) -> bool:
    """Whether `call` gives `function` a value (not None) for one of `parameters`: a call
    that passes no optimizer (`load_checkpoint(path, model)`) needs no scaler."""
    positional, _ = facts.parameters(function)
    for index, arg in enumerate(call.args):
        if arg.star:
            return True  # `*args` / `**kwargs` may bind it
        name = arg.keyword.value if arg.keyword is not None else (
            positional[index] if index < len(positional) else None)
        if name in parameters:
            return not (isinstance(arg.value, cst.Name) and arg.value.value == "None")
    return False


def _only_in(
    facts: ModuleFacts, classes: list[str], used: list[tuple[cst.FunctionDef | None, str | None]],
    receivers: int,
) -> bool:
    """Whether one class is the module's only receiver and holds every use of the scaler
    (its `self.scaler` then serves them all)."""
    if len(classes) != 1 or receivers != 1:
        return False
    return all(function is not None and facts.function_class.get(function) is not None
               and facts.function_class[function].name.value == classes[0]
               for function, _ in used)


def passed_optimizers(site: CallSite, kinds: KindTable) -> list[str]:
    """The optimizers a call passes (their keys): `optimizer` in `train(model, optimizer)`."""
    return [key for arg in site.call.args if kinds.is_optimizer(arg.value)
            and (key := receiver_key(arg.value)) is not None]


def _at_module_level(facts: ModuleFacts, node: cst.FunctionDef | cst.ClassDef) -> bool:
    return node in facts.module.body


def _project_calls(
    module: LinkedModule, program: Program, by_path: dict[Path, LinkedModule]
) -> list[tuple[CallSite, tuple[Path, str]]]:
    """Calls of functions and classes defined by other modules of the group."""
    facts = module.analysis.facts
    found = []
    for site in facts.calls:
        qualified = facts.imports.resolve_in_project(site.call.func)
        target = None if qualified is None else program.resolve(module.path, qualified)
        if target is not None and target[0] in by_path and target[0] != module.path:
            found.append((site, target))
    return found
