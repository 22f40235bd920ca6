"""The AMP code of a script rewritten by amprewrite (runtime or plain style), for O0's revert.

Everything is recognised through the scaler: names bound to a `GradScaler(...)` built from
amprewrite's runtime, `torch.amp`/`torch.cuda.amp` or FSDP's `ShardedGradScaler`; in a
project, also a scaler received as a parameter (`scaler = scaler or GradScaler()`, and the
parameter itself) and `self.scaler` created by a base class in another module (known by its
name and by `self.scaler.scale(loss).backward()`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis.autocast_values import turns_off
from amprewrite.analysis.dtype.views import AUTOCASTS
from amprewrite.analysis.facts import Binding, ModuleFacts, Statement
from amprewrite.analysis.names import dotted
from amprewrite.analysis.scaler_home import SCALER_NAME
from amprewrite.analysis.tree import descendants

_SCALER_CLASSES = ("GradScaler", "ShardedGradScaler")
_DECORATORS = ("custom_fwd", "custom_bwd")
_POLICY_CLASSES = ("MixedPrecision", "MixedPrecisionPolicy")  # FSDP1, FSDP2
_POLICY_NAME = re.compile(r"(fsdp_)?mp_policy(_\d+)?")  # the names the policy rule binds
_POLICY_ARGUMENTS = ["param_dtype", "reduce_dtype"]
_POLICY_KEYWORDS = ("mp_policy", "mixed_precision")


@dataclass
class AmpUsage:
    """What amprewrite wrote into a module: what reverting it to FP32 takes out."""

    scalers: set[str] = field(default_factory=set)  # keys holding a grad scaler
    imports: list[Statement] = field(default_factory=list)  # runtime / sharded scaler imports
    statements: list[Statement] = field(default_factory=list)  # lines to delete
    # the parts to delete of a line that holds others too (`loss.backward(); scaler.update()`)
    parts: list[tuple[cst.SimpleStatementLine, cst.BaseSmallStatement]] = field(
        default_factory=list)
    # amprewrite_runtime imports to narrow to the names they keep: a name a kept
    # `with autocast(enabled=False):` guard uses
    narrowed: list[tuple[cst.SimpleStatementLine, frozenset[str]]] = field(
        default_factory=list)
    unwrap: list[cst.With | cst.If] = field(default_factory=list)  # blocks to replace by bodies
    calls: list[cst.Call] = field(default_factory=list)  # scale(...).backward(), step(opt)
    scaled_arguments: list[cst.Call] = field(default_factory=list)  # `scaler.scale(x)` as an arg
    float32_casts: list[cst.Call] = field(default_factory=list)  # `to_float32(x)`: `x` again
    # `scaler=scaler`, `generator=seeding.generator`: keyword arguments to remove
    removed_keywords: list[tuple[cst.Call, cst.Arg]] = field(default_factory=list)
    seeding: set[str] = field(default_factory=set)  # keys holding enable_reproducibility()
    # checkpoint entries: (the dict literal or `dict(...)` call, the scaler's element in it)
    entries: list[tuple[cst.Dict | cst.Call, cst.DictElement | cst.Arg]] = field(
        default_factory=list)
    decorators: list[cst.Decorator] = field(default_factory=list)
    # id(`scaler.master_params(opt)`) -> what O0 puts back: `model.parameters()`, or the
    # optimizer's own parameters when the model it was initialized with is elsewhere
    master_params: dict[int, str] = field(default_factory=dict)
    # `def f(..., scaler=None)`: the parameters a project's rewrite added, by function
    parameters: list[tuple[cst.FunctionDef, str]] = field(default_factory=list)
    # a scaler is created as amprewrite writes one: the runtime's class, or the plain style's
    # `torch.amp.GradScaler(amp_device, ...)`
    ours: bool = False
    # the module holds what only amprewrite writes: a scaler as above, the runtime's import,
    # or the plain style's `amp_device`; its other autocasts are the author's
    rewritten: bool = False
    kept_autocasts: list[cst.With] = field(default_factory=list)  # the author's, in a rewrite

    def __bool__(self) -> bool:
        return bool(self.scalers or self.unwrap or self.decorators or self.imports
                    or self.parameters)


def amp_usage(facts: ModuleFacts) -> AmpUsage:
    usage = AmpUsage()
    scalers: list[cst.Call] = []  # the calls creating them
    for binding in facts.bindings:
        value = binding.value
        if (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
                and value.func.attr.value == "wrap_scaler" and value.args):
            value = value.args[0].value  # Determined: `context.wrap_scaler(GradScaler())`
        received = _received_scaler(value, facts)  # `scaler = scaler or GradScaler()`
        if received is not None and binding.function is not None:
            usage.parameters.append((binding.function, received))
            value = value.right  # type: ignore[attr-defined]
        if isinstance(value, cst.Call) and _is_scaler_class(value.func, facts):
            usage.scalers.update(binding.keys)
            _delete(usage, binding.statement, value)
            scalers.append(value)
    usage.scalers.update(_inherited_scalers(facts))
    for binding in facts.bindings:
        value = binding.value
        if isinstance(value, cst.Call) and facts.imports.resolve(
                value.func) == "amprewrite_runtime.enable_reproducibility":
            usage.seeding.update(binding.keys)
            _delete(usage, binding.statement, value)
        elif _is_float8_conversion(binding, facts):  # `model = float8_training(model)`
            _delete(usage, binding.statement, value)
    devices = _autocast_devices(facts)
    usage.ours = any((facts.imports.resolve(call.func) or "").startswith("amprewrite_runtime.")
                     or (call.args and dotted(call.args[0].value) in devices)
                     for call in scalers)
    usage.rewritten = usage.ours or bool(devices) or any(
        target == "amprewrite_runtime" or target.startswith("amprewrite_runtime.")
        for target in facts.imports.aliases.values())
    for binding in facts.bindings:
        if binding.keys and binding.keys[0] in devices:
            _delete(usage, binding.statement, binding.value)
    _fsdp_policies(facts, usage)
    models: dict[str, tuple[str, Statement]] = {}
    for site in facts.calls:
        _classify_call(site.call, site.statement, usage, facts, models)
    for site in facts.calls:
        func = site.call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "master_params":
            optimizer = dotted(site.call.args[0].value) if site.call.args else None
            model = _model_named(models[optimizer], site.function, facts) if (
                optimizer in models) else None
            if model is not None:
                usage.master_params[id(site.call)] = f"{model}.parameters()"
            elif optimizer is not None:  # initialized elsewhere: the same parameters
                usage.master_params[id(site.call)] = (
                    f'[p for group in {optimizer}.param_groups for p in group["params"]]')
    guards = _guards_kept(facts)
    for statement in facts.statements:
        if isinstance(statement, cst.SimpleStatementLine) and _is_amp_import(statement):
            kept = bound_names(statement) & guards
            if kept:
                usage.narrowed.append((statement, frozenset(kept)))
            else:
                usage.imports.append(statement)
        elif isinstance(statement, cst.With) and len(statement.items) == 1 and _is_autocast(
                statement.items[0].item, facts) and not turns_off(statement.items[0].item):
            if not usage.rewritten or _written(statement.items[0].item, facts, devices):
                usage.unwrap.append(statement)
            else:
                usage.kept_autocasts.append(statement)
        elif isinstance(statement, cst.If) and _guards_on_scaler(statement, usage):
            if _restores_scaler(statement, usage):
                usage.statements.append(statement)
            else:
                usage.unwrap.append(statement)
        if isinstance(statement, cst.FunctionDef):
            usage.decorators.extend(
                d for d in statement.decorators if _is_amp_decorator(d.decorator, facts) and (
                    not usage.rewritten or _written(d.decorator, facts, devices)))
    _whole_lines(usage)
    # `for opt in optimizers: scaler.unscale_(opt)`: the loop goes with its only statements.
    deleted = set(usage.statements)
    for statement in facts.statements:
        if (isinstance(statement, cst.For) and isinstance(statement.body, cst.IndentedBlock)
                and statement.orelse is None and all(s in deleted for s in statement.body.body)):
            usage.statements.append(statement)
    return usage


def _is_float8_conversion(binding: Binding, facts: ModuleFacts) -> bool:
    """`model = float8_training(model, ...)`, as the float8 rule writes it."""
    value = binding.value
    return (isinstance(value, cst.Call) and bool(value.args)
            and facts.imports.resolve(value.func) == "amprewrite_runtime.float8_training"
            and binding.keys == (dotted(value.args[0].value),))


def _fsdp_policies(facts: ModuleFacts, usage: AmpUsage) -> None:
    """`mp_policy = MixedPrecisionPolicy(param_dtype=..., reduce_dtype=...)` as the FSDP
    policy rule writes it, the keyword handing it to each wrap, and its class's import when
    nothing else uses the class."""
    policies: dict[str, str] = {}  # the policy's name -> its class's local name
    for binding in facts.bindings:
        value = binding.value
        if not (len(binding.keys) == 1 and _POLICY_NAME.fullmatch(binding.keys[0])
                and isinstance(value, cst.Call)):
            continue
        resolved = facts.imports.resolve(value.func) or ""
        if (resolved.startswith("torch.distributed.")
                and resolved.rsplit(".", 1)[-1] in _POLICY_CLASSES
                and [a.keyword.value for a in value.args if a.keyword] == _POLICY_ARGUMENTS):
            policies[binding.keys[0]] = dotted(value.func) or ""
            _delete(usage, binding.statement, value)
    for site in facts.calls:
        usage.removed_keywords.extend(
            (site.call, arg) for arg in site.call.args if arg.keyword is not None
            and arg.keyword.value in _POLICY_KEYWORDS and dotted(arg.value) in policies)
    for name in set(policies.values()):
        uses = len(re.findall(rf"\b{re.escape(name)}\b", facts.code))
        line = _import_line(facts, name)
        if line is None or uses > 1 + list(policies.values()).count(name):
            continue
        kept = bound_names(line) - {name}
        if kept:
            usage.narrowed.append((line, frozenset(kept)))
        else:
            usage.imports.append(line)


def _import_line(facts: ModuleFacts, name: str) -> cst.SimpleStatementLine | None:
    """The top-level from-import line binding `name`."""
    for statement in facts.module.body:
        if (isinstance(statement, cst.SimpleStatementLine)
                and all(isinstance(small, cst.ImportFrom) for small in statement.body)
                and name in bound_names(statement)):
            return statement
    return None


def _model_named(
    initialized: tuple[str, Statement], function: cst.FunctionDef | None, facts: ModuleFacts
) -> str | None:
    """How `function` names the model `scaler.initialize(model, ...)` was given, if it can:
    the same code in the same function, or the attribute `__init__` stores it in, in a method
    of that class (`initialize(model, ...)` in `__init__`, clipping in `optimizer_step`)."""
    model, statement = initialized
    where = facts.statements[statement].function
    if where is function:
        return model
    cls = facts.function_class.get(where) if where is not None else None
    if cls is None or function is None or facts.function_class.get(function) is not cls:
        return None
    if model.startswith("self."):
        return model
    if where is facts.init_of(cls):
        return next((key for key, name in facts.stored_parameters(cls).items()
                     if name == model), None)
    return None


# runtime calls whose argument is the FP32 code again (`to_float32(x)`: `x`)
_UNWRAPPED_CALLS = ("amprewrite_runtime.to_float32", "amprewrite_runtime.float32_sigmoid")


def _classify_call(
    call: cst.Call, statement: Statement, usage: AmpUsage, facts: ModuleFacts,
    models: dict[str, tuple[str, Statement]],
) -> None:
    func = call.func
    method = (func.attr.value if isinstance(func, cst.Attribute)
              else func.value if isinstance(func, cst.Name) else "")  # `backward(...)`
    for arg in call.args:
        value = dotted(arg.value) or ""
        if arg.keyword is not None and (
                (SCALER_NAME.fullmatch(arg.keyword.value) and value in usage.scalers)
                or value.split(".")[0] in usage.seeding):
            usage.removed_keywords.append((call, arg))  # `step_optimizer(opt, scaler=scaler)`
        elif (method == "backward" and isinstance(arg.value, cst.Call)
              and _is_scale_call(arg.value, usage)):
            usage.scaled_arguments.append(arg.value)  # `context.backward(scaler.scale(loss))`
    if facts.imports.resolve(func) in _UNWRAPPED_CALLS and len(call.args) == 1:
        usage.float32_casts.append(call)
    if not isinstance(func, cst.Attribute):
        return
    owner = dotted(func.value)
    if owner in usage.scalers:
        if method == "step":
            usage.calls.append(call)
        elif method in ("update", "unscale_", "initialize") or (
                method in ("get_scale", "load_state_dict")
                and isinstance(statement, cst.SimpleStatementLine)):
            _delete(usage, statement, call)
            if method == "initialize" and len(call.args) == 2:
                model = facts.module.code_for_node(call.args[0].value)
                models[dotted(call.args[1].value) or ""] = (model, statement)
        elif method == "state_dict":
            _checkpoint_entry(call, statement, usage)
    elif method == "backward" and isinstance(func.value, cst.Call) and _is_scale_call(
            func.value, usage):
        usage.calls.append(call)


def _received_scaler(value: cst.BaseExpression, facts: ModuleFacts) -> str | None:
    """`scaler` of `scaler or GradScaler()`: the parameter a project's rewrite added."""
    if (isinstance(value, cst.BooleanOperation) and isinstance(value.operator, cst.Or)
            and isinstance(value.left, cst.Name) and isinstance(value.right, cst.Call)
            and _is_scaler_class(value.right.func, facts)):
        return value.left.value
    return None


def _inherited_scalers(facts: ModuleFacts) -> set[str]:
    """`self.scaler` of `self.scaler.scale(loss).backward()` where the module creates none: a
    base class in another module does."""
    found = set()
    for site in facts.calls:
        func = site.call.func
        if (isinstance(func, cst.Attribute) and func.attr.value == "backward"
                and isinstance(func.value, cst.Call)
                and isinstance(func.value.func, cst.Attribute)
                and func.value.func.attr.value == "scale"):
            key = dotted(func.value.func.value) or ""
            if key.startswith("self.") and SCALER_NAME.fullmatch(key.removeprefix("self.")):
                found.add(key)
    return found


def _is_scale_call(call: cst.Call, usage: AmpUsage) -> bool:
    func = call.func
    return (isinstance(func, cst.Attribute) and func.attr.value == "scale"
            and dotted(func.value) in usage.scalers)


def _checkpoint_entry(call: cst.Call, statement: Statement, usage: AmpUsage) -> None:
    """`"scaler": scaler.state_dict()` in a dict, `scaler=...` in dict(), or its own line."""
    for node in descendants(statement):
        if not isinstance(node, cst.Dict | cst.Call):
            continue
        items = node.elements if isinstance(node, cst.Dict) else node.args
        for item in items:
            if isinstance(item, cst.DictElement | cst.Arg) and item.value is call:
                usage.entries.append((node, item))
                return
    _delete(usage, statement, call)


def _delete(usage: AmpUsage, statement: Statement, node: cst.CSTNode) -> None:
    """Delete the statement holding `node`: only its part of a line that holds others, which
    are the author's (`loss.backward(); opt.step()` on one line with the scaler's update)."""
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) > 1:
        part = next(small for small in statement.body
                    if any(inner is node for inner in descendants(small)))
        usage.parts.append((statement, part))
    else:
        usage.statements.append(statement)


def _whole_lines(usage: AmpUsage) -> None:
    """A line every part of which is deleted is deleted whole."""
    parts: dict[cst.SimpleStatementLine, set[int]] = {}
    for line, part in usage.parts:
        parts.setdefault(line, set()).add(id(part))
    whole = {line for line, ids in parts.items() if len(ids) == len(line.body)}
    usage.statements.extend(whole)
    usage.parts = [(line, part) for line, part in usage.parts if line not in whole]


def _guards_kept(facts: ModuleFacts) -> set[str]:
    """The local names of the autocasts that `with ...(enabled=False):` guards call."""
    return {dotted(item.item.func) or "" for statement in facts.statements
            if isinstance(statement, cst.With) for item in statement.items
            if isinstance(item.item, cst.Call) and _is_autocast(item.item, facts)
            and turns_off(item.item)}


def bound_names(line: cst.SimpleStatementLine) -> set[str]:
    """The names an import line binds."""
    return {dotted(alias.asname.name if alias.asname else alias.name) or ""
            for small in line.body if isinstance(small, cst.ImportFrom | cst.Import)
            and not isinstance(small.names, cst.ImportStar) for alias in small.names}


def _is_scaler_class(func: cst.BaseExpression, facts: ModuleFacts) -> bool:
    resolved = facts.imports.resolve(func) or ""
    return resolved.rsplit(".", 1)[-1] in _SCALER_CLASSES and resolved.startswith(
        ("amprewrite_runtime", "torch."))


def _is_autocast(item: cst.BaseExpression, facts: ModuleFacts) -> bool:
    return isinstance(item, cst.Call) and facts.imports.resolve(item.func) in AUTOCASTS


def _written(node: cst.BaseExpression, facts: ModuleFacts, devices: set[str]) -> bool:
    """Whether an autocast or `custom_fwd` is spelled as amprewrite writes it: the runtime's,
    or the plain style's on its `amp_device`."""
    target = node.func if isinstance(node, cst.Call) else node
    if (facts.imports.resolve(target) or "").startswith("amprewrite_runtime."):
        return True
    return isinstance(node, cst.Call) and any(
        dotted(arg.value) in devices for arg in node.args
        if arg.keyword is None or arg.keyword.value in ("device", "device_type"))


def _autocast_devices(facts: ModuleFacts) -> set[str]:
    """The plain style's device variable: `amp_device` in `torch.autocast(amp_device)`,
    `torch.amp.GradScaler(amp_device, ...)`, `custom_fwd(device_type=amp_device)`."""
    devices = set()
    for site in facts.calls:
        resolved = facts.imports.resolve(site.call.func) or ""
        last = resolved.rsplit(".", 1)[-1]
        if resolved not in AUTOCASTS and last not in (*_SCALER_CLASSES, *_DECORATORS):
            continue
        for position, arg in enumerate(site.call.args):
            keyword = arg.keyword.value if arg.keyword is not None else None
            if (position == 0 and keyword is None) or keyword in ("device", "device_type"):
                name = dotted(arg.value)
                if name is not None and _AMPREWRITE_DEVICE.fullmatch(name):
                    devices.add(name)  # the author's own `device` is not ours to delete
    return devices


_AMPREWRITE_DEVICE = re.compile(r"(amp|autocast)_device(_\d+)?")  # the plain style's names


def _is_amp_import(line: cst.SimpleStatementLine) -> bool:
    for small in line.body:
        if isinstance(small, cst.ImportFrom) and small.module is not None:
            module = dotted(small.module) or ""
            if module == "amprewrite_runtime" or module.endswith("sharded_grad_scaler"):
                return True
    return False


def _guards_on_scaler(statement: cst.If, usage: AmpUsage) -> bool:
    """`if not scaler.last_step_skipped:`, `if scaler.get_scale() >= ...:` or
    `if "scaler" in checkpoint: scaler.load_state_dict(...)`."""
    if statement.orelse is not None:
        return False
    return any(dotted(node) in usage.scalers or (
        isinstance(node, cst.Attribute) and dotted(node.value) in usage.scalers)
        for node in descendants(statement.test)) or _restores_scaler(statement, usage)


def _restores_scaler(statement: cst.If, usage: AmpUsage) -> bool:
    body = statement.body.body
    return len(body) == 1 and isinstance(body[0], cst.SimpleStatementLine) and any(
        isinstance(node, cst.Attribute) and node.attr.value == "load_state_dict"
        and dotted(node.value) in usage.scalers for node in descendants(body[0]))


def _is_amp_decorator(node: cst.BaseExpression, facts: ModuleFacts) -> bool:
    target = node.func if isinstance(node, cst.Call) else node
    resolved = facts.imports.resolve(target) or ""
    return resolved.rsplit(".", 1)[-1] in _DECORATORS and resolved.startswith(
        ("amprewrite_runtime", "torch."))
