"""A cheap first look at a module (Python's own `ast`, no libcst): what it imports from the
project, which project functions and classes it calls, which of its own may receive an
optimizer from a caller, and which return one they build (factories). It only finds the
candidates: `links` decides on libcst's analysis.
"""

from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from amprewrite.analysis.kinds import Kind, kind_from_name, kind_of_constructor
from amprewrite.project.layout import ModuleFinder

# Calls on an optimizer that make it one: stepped, zeroed, saved or restored.
_OPTIMIZER_METHODS = frozenset({"step", "zero_grad", "state_dict", "load_state_dict"})

Symbol = tuple[Path, str]  # a module's file and a name it defines


@dataclass
class Outline:
    """What one module imports, calls and offers."""

    path: Path
    imported: set[Path] = field(default_factory=set)  # project modules it imports
    calls: set[Symbol] = field(default_factory=set)  # project functions and classes it calls
    receivers: set[str] = field(default_factory=set)  # its functions/classes taking an optimizer
    factories: set[str] = field(default_factory=set)  # its functions returning a new optimizer


def outline(path: Path, source: bytes, finder: ModuleFinder) -> Outline | None:
    """The outline of the module at `path`, or None when it does not parse."""
    try:
        with warnings.catch_warnings():  # e.g. an invalid escape: the engine's business
            warnings.simplefilter("ignore")
            tree = ast.parse(source, str(path))
    except (SyntaxError, ValueError):
        return None
    result = Outline(path)
    modules, symbols = _imports(tree, path, finder)
    result.imported = set(modules.values()) | {file for file, _ in symbols.values()}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            target = _resolve(_dotted(node.func), modules, symbols)
            if target is not None:
                result.calls.add(target)
    torch_names = _torch_aliases(tree)
    for node in tree.body:
        if _may_receive(node):
            result.receivers.add(node.name)  # type: ignore[attr-defined]
        if isinstance(node, ast.FunctionDef) and _returns_optimizer(node, torch_names):
            result.factories.add(node.name)
    return result


def _torch_aliases(tree: ast.Module) -> dict[str, str]:
    """Local names bound to torch and what they stand for (`optim` -> `torch.optim`)."""
    aliases: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "torch":
                    local = alias.asname or alias.name.split(".")[0]
                    aliases[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def _returns_optimizer(function: ast.FunctionDef, torch_names: dict[str, str]) -> bool:
    """`return torch.optim.AdamW(...)`, or the return of a name such a call bound."""

    def builds(value: ast.expr | None) -> bool:
        if not isinstance(value, ast.Call):
            return False
        name = _dotted(value.func)
        head, _, rest = (name or "").partition(".")
        qualified = torch_names.get(head)
        if qualified is None:
            return False
        return kind_of_constructor(f"{qualified}.{rest}" if rest else qualified) is Kind.OPTIMIZER

    built = {target.id for node in ast.walk(function) if isinstance(node, ast.Assign)
             and builds(node.value) for target in node.targets if isinstance(target, ast.Name)}
    returns = [node.value for node in ast.walk(function) if isinstance(node, ast.Return)]
    return bool(returns) and all(
        builds(value) or (isinstance(value, ast.Name) and value.id in built)
        for value in returns)


def _may_receive(node: ast.stmt) -> bool:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return _takes_optimizer(node)
    return isinstance(node, ast.ClassDef) and _class_takes_optimizer(node)


def _imports(
    tree: ast.Module, path: Path, finder: ModuleFinder
) -> tuple[dict[str, Path], dict[str, Symbol]]:
    """Local dotted names bound to project modules, and local names bound to their symbols."""
    modules: dict[str, Path] = {}
    symbols: dict[str, Symbol] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                file = finder.find(path, alias.name)
                if file is not None:
                    modules[alias.asname or alias.name] = file
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            for alias in node.names:
                local = alias.asname or alias.name
                submodule = finder.find(path, f"{module}.{alias.name}" if module else alias.name,
                                        node.level)
                if submodule is not None:
                    modules[local] = submodule
                    continue
                file = finder.find(path, module, node.level)
                if file is not None and alias.name != "*":
                    symbols[local] = (file, alias.name)
    return modules, symbols


def _resolve(
    name: str | None, modules: dict[str, Path], symbols: dict[str, Symbol]
) -> Symbol | None:
    if name is None:
        return None
    if name in symbols:
        return symbols[name]
    prefix, _, attribute = name.rpartition(".")
    if prefix in modules and attribute:
        return modules[prefix], attribute
    return None


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    arguments = function.args
    return {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)}


def _optimizer_uses(node: ast.AST) -> set[str]:
    """Dotted receivers of `.step()`, `.zero_grad()`, `.state_dict()`, `.load_state_dict()`,
    and names an optimizer's name is passed on to calls with."""
    used: set[str] = set()
    for call in ast.walk(node):
        if not isinstance(call, ast.Call):
            continue
        if isinstance(call.func, ast.Attribute) and call.func.attr in _OPTIMIZER_METHODS:
            receiver = _dotted(call.func.value)
            if receiver is not None:
                used.add(receiver)
        values = [*call.args, *(k.value for k in call.keywords)]
        used.update(v.id for v in values if isinstance(v, ast.Name)
                    and kind_from_name(v.id, (Kind.OPTIMIZER,)) is Kind.OPTIMIZER)
    return used


def _takes_optimizer(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return bool(_parameters(function) & _optimizer_uses(function))


def _class_takes_optimizer(cls: ast.ClassDef) -> bool:
    """An `__init__` parameter stored on `self` that a method steps, saves or restores."""
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef)
                 and n.name == "__init__"), None)
    if init is None:
        return False
    parameters = _parameters(init)
    stored = {f"self.{target.attr}"
              for statement in ast.walk(init) if isinstance(statement, ast.Assign)
              and isinstance(statement.value, ast.Name) and statement.value.id in parameters
              for target in statement.targets if isinstance(target, ast.Attribute)}
    return bool(stored & _optimizer_uses(cls))
