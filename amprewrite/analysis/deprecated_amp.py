"""Uses of the AMP namespaces deprecated since torch 2.4: `torch.cuda.amp`, `torch.cpu.amp`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import libcst as cst

from amprewrite.analysis.device_types import device_type_code
from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.names import dotted
from amprewrite.analysis.tree import children

DEPRECATED = {"torch.cuda.amp": "cuda", "torch.cpu.amp": "cpu"}
_PARTIAL = "functools.partial"
_NAMES = frozenset({"autocast", "GradScaler", "custom_fwd", "custom_bwd"})


@dataclass(frozen=True)
class DeprecatedUse:
    """One use of `torch.cuda.amp` / `torch.cpu.amp`."""

    node: cst.Call | cst.Decorator  # a call, or a decorator used without a call
    name: str  # autocast, GradScaler, custom_fwd, custom_bwd
    device: str  # "cuda" or "cpu"
    # the script's own device type where a `torch.cuda.amp` call runs (`device.type`,
    # `device_type`); None: "cuda"
    device_code: str | None = None
    partial: bool = False  # `functools.partial(torch.cuda.amp.autocast, ...)`: `node`


@dataclass
class DeprecatedAmp:
    """The deprecated AMP uses and imports of a module, to migrate to `torch.amp`."""

    uses: list[DeprecatedUse] = field(default_factory=list)
    imports: list[cst.ImportFrom | cst.Import] = field(default_factory=list)
    # other references (`ac = autocast`, `fwd = torch.cuda.amp.custom_fwd`): what they are
    # called with is not seen, so nothing is migrated
    values: list[cst.BaseExpression] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.uses or self.imports)


def deprecated_amp(facts: ModuleFacts) -> DeprecatedAmp:
    found = DeprecatedAmp()
    if not any(_deprecated(target) for target in facts.imports.aliases.values()) and not any(
            "torch.cuda.amp" in s or "torch.cpu.amp" in s for s in _attribute_texts(facts)):
        return found
    used: set[int] = set()  # the references the uses make
    for site in facts.calls:
        call = site.call
        use = _use(call, call.func, facts)
        if use is None and call.args and facts.imports.resolve(call.func) == _PARTIAL:
            use = _use(call, call.args[0].value, facts)
            use = replace(use, partial=True) if use is not None else None
        if use is not None and use.device == "cuda":
            use = replace(use, device_code=device_type_code(facts, site.statement))
        if use is not None:
            found.uses.append(use)
            used.add(id(call.args[0].value if use.partial else call.func))
    for function in facts.functions:
        for decorator in function.decorators:
            if not isinstance(decorator.decorator, cst.Call):
                use = _use(decorator, decorator.decorator, facts)
                if use is not None:
                    found.uses.append(use)
                    used.add(id(decorator.decorator))
    found.values = [node for node in _references(facts.module, facts) if id(node) not in used]
    for statement in facts.statements:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if (isinstance(small, cst.ImportFrom) and small.module is not None and (
                        _deprecated(dotted(small.module) or "") or _imports_amp_module(small))) or (
                        isinstance(small, cst.Import) and any(
                        _deprecated(dotted(a.name) or "") for a in small.names)):
                    found.imports.append(small)
    return found


def _references(module: cst.Module, facts: ModuleFacts) -> Iterator[cst.BaseExpression]:
    """The names and attributes naming a deprecated AMP class or decorator (not in imports)."""
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Import | cst.ImportFrom):
            continue
        if isinstance(node, cst.Name | cst.Attribute):
            module_name, _, name = (facts.imports.resolve(node) or "").rpartition(".")
            if module_name in DEPRECATED and name in _NAMES:
                yield node
                continue
        stack.extend(children(node))


def _use(
    node: cst.Call | cst.Decorator, func: cst.BaseExpression, facts: ModuleFacts
) -> DeprecatedUse | None:
    resolved = facts.imports.resolve(func) or ""
    module, _, name = resolved.rpartition(".")
    if module in DEPRECATED and name in _NAMES:
        return DeprecatedUse(node, name, DEPRECATED[module])
    return None


def _imports_amp_module(node: cst.ImportFrom) -> bool:
    """`from torch.cuda import amp` (the module itself, bound as `amp`)."""
    return (dotted(node.module) in ("torch.cuda", "torch.cpu") if node.module else False) and (
        not isinstance(node.names, cst.ImportStar)
        and [dotted(a.name) for a in node.names] == ["amp"])


def _deprecated(qualified: str) -> bool:
    return any(qualified == m or qualified.startswith(m + ".") for m in DEPRECATED)


def _attribute_texts(facts: ModuleFacts) -> list[str]:
    """The calls' functions, and the first argument of each: `partial(torch.cuda.amp...)`."""
    return [dotted(node) or "" for site in facts.calls
            for node in (site.call.func, *(a.value for a in site.call.args[:1]))]
