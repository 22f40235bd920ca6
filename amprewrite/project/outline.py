"""A cheap first look at a module (Python's own `ast`, no libcst): what it imports from the
project, which project functions and classes it calls or extends, which of its own may
receive an optimizer from a caller, and which return one they build (factories). It only
finds the candidates: `links` decides on libcst's analysis.

Each module is walked once: every node of each top-level statement, imports resolved after.
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
    # project functions and classes it calls, and the project classes its classes extend
    calls: set[Symbol] = field(default_factory=set)
    receivers: set[str] = field(default_factory=set)  # its functions/classes taking an optimizer
    factories: set[str] = field(default_factory=set)  # its functions returning a new optimizer
    defines: set[str] = field(default_factory=set)  # its top-level functions and classes
    exports: dict[str, Symbol] = field(default_factory=dict)  # names it imports from the project
    star_exports: list[Path] = field(default_factory=list)  # `from .module import *`, in order
    module_names: dict[str, Path] = field(default_factory=dict)  # names bound to its modules


@dataclass
class _Statement:
    """What one top-level statement holds, gathered in its one walk."""

    calls: list[str] = field(default_factory=list)  # dotted names called or extended
    uses: set[str] = field(default_factory=set)  # receivers of optimizer methods, names passed
    returns: list[ast.expr | None] = field(default_factory=list)
    assigned: dict[str, ast.expr] = field(default_factory=dict)  # `name = value`


def outline(path: Path, source: bytes, finder: ModuleFinder) -> Outline | None:
    """The outline of the module at `path`, or None when it does not parse or is nested too
    deeply for a recursive walk (its own run reports it)."""
    try:
        with warnings.catch_warnings():  # e.g. an invalid escape: the engine's business
            warnings.simplefilter("ignore")
            tree = ast.parse(source, str(path))
    except (SyntaxError, ValueError, RecursionError):
        return None
    try:
        return _outline(path, tree, finder)
    except RecursionError:
        return None


def _outline(path: Path, tree: ast.Module, finder: ModuleFinder) -> Outline:
    result = Outline(path)
    imports: list[ast.Import | ast.ImportFrom] = []
    gathered = [(top, _gather(top, imports)) for top in tree.body]
    modules, result.exports, result.star_exports = _imports(imports, path, finder)
    result.module_names = modules
    result.imported = ({*modules.values(), *result.star_exports}
                       | {file for file, _ in result.exports.values()})
    torch_names = _torch_aliases(imports)
    for top, found in gathered:
        for name in found.calls:
            target = _resolve(name, modules, result.exports)
            if target is not None:
                result.calls.add(target)
        if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            result.defines.add(top.name)
        if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef):
            if _parameters(top) & found.uses:
                result.receivers.add(top.name)
            if _returns_optimizer(found, torch_names):
                result.factories.add(top.name)
        elif isinstance(top, ast.ClassDef) and _class_takes_optimizer(top, found.uses):
            result.receivers.add(top.name)
    return result


def _gather(top: ast.stmt, imports: list[ast.Import | ast.ImportFrom]) -> _Statement:
    found = _Statement()
    for node in ast.walk(top):
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name is not None:
                found.calls.append(name)
            if isinstance(node.func, ast.Attribute) and node.func.attr in _OPTIMIZER_METHODS:
                receiver = _dotted(node.func.value)
                if receiver is not None:
                    found.uses.add(receiver)
            values = [*node.args, *(k.value for k in node.keywords)]
            found.uses.update(v.id for v in values if isinstance(v, ast.Name)
                              and kind_from_name(v.id, (Kind.OPTIMIZER,)) is Kind.OPTIMIZER)
        elif isinstance(node, ast.Dict):  # `{"optimizer": optimizer}`: pickled in a checkpoint
            found.uses.update(v.id for v in node.values if isinstance(v, ast.Name)
                              and kind_from_name(v.id, (Kind.OPTIMIZER,)) is Kind.OPTIMIZER)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            imports.append(node)
        elif isinstance(node, ast.ClassDef):  # a base class's module shares its attributes
            found.calls.extend(name for name in map(_dotted, node.bases) if name is not None)
        elif isinstance(node, ast.Return):
            found.returns.append(node.value)
        elif isinstance(node, ast.Assign):
            found.assigned.update((t.id, node.value) for t in node.targets
                                  if isinstance(t, ast.Name))
    return found


def _imports(
    imports: list[ast.Import | ast.ImportFrom], path: Path, finder: ModuleFinder
) -> tuple[dict[str, Path], dict[str, Symbol], list[Path]]:
    """Local dotted names bound to project modules, local names bound to their symbols, and
    the project modules imported with `*`."""
    modules: dict[str, Path] = {}
    symbols: dict[str, Symbol] = {}
    stars: list[Path] = []
    for node in imports:
        if isinstance(node, ast.Import):
            for alias in node.names:
                file = finder.find(path, alias.name)
                if file is not None:
                    modules[alias.asname or alias.name] = file
            continue
        module = node.module or ""
        for alias in node.names:
            local = alias.asname or alias.name
            submodule = finder.find(path, f"{module}.{alias.name}" if module else alias.name,
                                    node.level)
            if submodule is not None:
                modules[local] = submodule
                continue
            file = finder.find(path, module, node.level)
            if file is not None and alias.name == "*":
                stars.append(file)
            elif file is not None:
                symbols[local] = (file, alias.name)
    return modules, symbols, stars


def _torch_aliases(imports: list[ast.Import | ast.ImportFrom]) -> dict[str, str]:
    """Local names bound to torch and what they stand for (`optim` -> `torch.optim`)."""
    aliases: dict[str, str] = {}
    for node in imports:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "torch":
                    local = alias.asname or alias.name.split(".")[0]
                    aliases[local] = alias.name if alias.asname else local
        elif (node.module or "").split(".")[0] == "torch" and not node.level:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def _returns_optimizer(found: _Statement, torch_names: dict[str, str]) -> bool:
    """Every `return` gives back `torch.optim.AdamW(...)`, or a name such a call bound."""

    def builds(value: ast.expr | None) -> bool:
        if not isinstance(value, ast.Call):
            return False
        head, _, rest = (_dotted(value.func) or "").partition(".")
        qualified = torch_names.get(head)
        if qualified is None:
            return False
        return kind_of_constructor(f"{qualified}.{rest}" if rest else qualified) is Kind.OPTIMIZER

    return bool(found.returns) and all(
        builds(value) or (isinstance(value, ast.Name) and builds(found.assigned.get(value.id)))
        for value in found.returns)


def _resolve(
    name: str, modules: dict[str, Path], symbols: dict[str, Symbol]
) -> Symbol | None:
    if name in symbols:
        return symbols[name]
    prefix, _, attribute = name.rpartition(".")
    if prefix in symbols and attribute:  # `training.pass_epoch`, `training` re-exported
        file, symbol = symbols[prefix]
        return file, f"{symbol}.{attribute}"
    parts = name.split(".")
    for split in range(len(parts) - 1, 0, -1):  # `pkg.engine.Engine` after `import pkg`
        module = ".".join(parts[:split])
        if module in modules:
            return modules[module], ".".join(parts[split:])
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


def _class_takes_optimizer(cls: ast.ClassDef, uses: set[str]) -> bool:
    """An `__init__` parameter stored on `self` that a method steps, saves or restores; or a
    method storing an optimizer it is given into a registry of `self` (`def register(self,
    name, model, optimizer): self.optimizers[name] = optimizer`)."""
    if any(_registers_optimizer(n) for n in cls.body if isinstance(n, ast.FunctionDef)):
        return True
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef)
                 and n.name == "__init__"), None)
    if init is None:
        return False
    parameters = _parameters(init)
    stored = {f"self.{target.attr}"
              for statement in init.body if isinstance(statement, ast.Assign)
              and isinstance(statement.value, ast.Name) and statement.value.id in parameters
              for target in statement.targets if isinstance(target, ast.Attribute)}
    return bool(stored & uses)


def _registers_optimizer(method: ast.FunctionDef) -> bool:
    """`self.optimizers[name] = optimizer` of a parameter named for an optimizer."""
    parameters = _parameters(method)
    return any(
        isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
        and node.value.id in parameters
        and kind_from_name(node.value.id, (Kind.OPTIMIZER,)) is Kind.OPTIMIZER
        and any(isinstance(t, ast.Subscript) and _dotted(t.value) is not None
                and str(_dotted(t.value)).startswith("self.") for t in node.targets)
        for node in ast.walk(method))
