"""Whether a reverted module still holds together: what O0 checks before it takes mixed
precision out, on the text the revert would write (Python's own `ast` and `symtable`).

A revert breaks a module when it leaves a name read that nothing binds any more (the scaler
created in `main()` and passed to `train(..., scaler)`), a method called on a name bound only
to None (`self.scaler = None` kept, `self.scaler.load_state_dict(...)` too), a scaler's state
restored that is no longer saved, or any use of the scaler it took out.
"""

from __future__ import annotations

import ast
import builtins
import symtable
from collections.abc import Collection, Iterator
from dataclasses import dataclass

# Names every module has without binding them.
_MODULE_NAMES = frozenset({"__file__", "__name__", "__doc__", "__spec__", "__loader__",
                           "__package__", "__builtins__", "__path__", "__annotations__",
                           "__dict__", "__class__", "__qualname__", "__module__"})
_ALWAYS_BOUND = frozenset(dir(builtins)) | _MODULE_NAMES


@dataclass(frozen=True)
class Problem:
    """Where a module does not hold together (a line and column of its text), and how."""

    line: int
    col: int
    message: str
    kind: str  # "unbound", "none call", "restore", "scaler"


def dotted(node: ast.expr) -> str | None:
    """`self.scaler` for `self.scaler`, None for anything but names and attributes."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        owner = dotted(node.value)
        return None if owner is None else f"{owner}.{node.attr}"
    return None


def problems(tree: ast.Module, text: str) -> list[Problem]:
    """Unbound names and attributes, method calls on None and restores without their save in
    `tree` (parsed from `text`), in source order."""
    found = [*unbound_names(tree, text), *unassigned_attributes(tree), *none_calls(tree),
             *restores_without_save(tree)]
    return sorted(found, key=lambda p: (p.line, p.col))


def new_problems(before: str, after: str, scalers: Collection[str], whole: bool = False
                 ) -> list[Problem]:
    """What `after` (a revert of `before`) breaks that `before` did not: the problems above
    that `before` lacks (by kind and message), and every use of a key in `scalers` left;
    `whole`: the revert takes out all mixed precision, so an autocast or a scaler created
    that is left is one too."""
    old_tree, new_tree = ast.parse(before), ast.parse(after)
    old = {(p.kind, p.message) for p in problems(old_tree, before)}
    found = [p for p in problems(new_tree, after) if (p.kind, p.message) not in old]
    found += scaler_uses(new_tree, scalers) + scaled_backwards(new_tree)
    found += lost_returns(old_tree, new_tree)
    if whole:
        found += amp_left(new_tree)
    return sorted(found, key=lambda p: (p.line, p.col))


_AMP_CALLS = ("autocast", "GradScaler", "ShardedGradScaler")


def amp_left(tree: ast.Module) -> list[Problem]:
    """Autocasts (not `enabled=False` guards) and scalers still called for."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = (dotted(node.func) or "").rsplit(".", 1)[-1]
        off = any(k.arg == "enabled" and isinstance(k.value, ast.Constant)
                  and k.value.value is False for k in node.keywords)
        if name in _AMP_CALLS and not off:
            found.append(Problem(node.lineno, node.col_offset + 1,
                                 f"`{dotted(node.func)}(...)` is still called", "amp"))
    return found


def scaler_uses(tree: ast.Module, scalers: Collection[str]) -> list[Problem]:
    """Every read of a key in `scalers` (`scaler`, `self.scaler`, or an attribute of one)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name | ast.Attribute) and isinstance(node.ctx, ast.Load):
            key = dotted(node)
            if key is not None and any(key == s or key.startswith(s + ".") for s in scalers):
                if isinstance(node, ast.Attribute) and dotted(node.value) in scalers:
                    continue  # `scaler.step`: its `scaler` is reported
                found.append(Problem(node.lineno, node.col_offset + 1,
                                     f"`{key}` is still used", "scaler"))
    return found


def scaled_backwards(tree: ast.Module) -> list[Problem]:
    """`x.scale(loss).backward()`: a scaler still scaling a backward (one the module receives,
    which the revert could not know for one)."""
    return [Problem(node.lineno, node.col_offset + 1,
                    f"`{dotted(node.func.value.func.value)}.scale(...)` still scales this "
                    "backward", "scaler")
            for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr == "backward"
            and isinstance(node.func.value, ast.Call)
            and isinstance(node.func.value.func, ast.Attribute)
            and node.func.value.func.attr == "scale"]


def lost_returns(before: ast.Module, after: ast.Module) -> list[Problem]:
    """Functions that return a value in `before` at more places than in `after` (a
    `return scaler.get_scale()` taken out: the function returns None)."""
    old, new = _returns(before), _returns(after)
    return [Problem(function.lineno, function.col_offset + 1,
                    f"`{name}()` no longer returns what it returned", "return")
            for name, (count, function) in new.items() if count < old.get(name, (0, None))[0]]


def _returns(tree: ast.Module) -> dict[str, tuple[int, ast.stmt]]:
    """Each function's qualified name -> how many `return <value>` it holds, and itself."""
    found: dict[str, tuple[int, ast.stmt]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    count = sum(isinstance(n, ast.Return) and n.value is not None
                                for n in _own_nodes(child))
                    found[name] = (count, child)
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def unbound_names(tree: ast.Module, text: str) -> list[Problem]:
    """Names a scope reads that no scope binds where Python looks them up (a NameError when
    the code runs); none in a module with a star import, whose names cannot be known."""
    if any(isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names)
           for node in ast.walk(tree)):
        return []
    table = symtable.symtable(text, "<module>", "exec")
    module_bound = {s.get_name() for s in table.get_symbols()
                    if s.is_assigned() or s.is_imported() or s.is_namespace()}
    module_bound |= {s.get_name() for scope in _scopes(table) for s in scope.get_symbols()
                     if s.is_declared_global() and s.is_assigned()}
    unbound: set[str] = set()
    for scope in [table, *_scopes(table)]:
        for symbol in scope.get_symbols():
            name = symbol.get_name()
            if (symbol.is_referenced() and (scope is table or symbol.is_global())
                    and name not in _ALWAYS_BOUND and name not in module_bound):
                unbound.add(name)
    return [Problem(node.lineno, node.col_offset + 1, f"`{node.id}` is not defined", "unbound")
            for node in _first_reads(tree, unbound)]


def unassigned_attributes(tree: ast.Module) -> list[Problem]:
    """`self.x` read in a method of a class (with no base class but `object`, whose
    attributes all come from itself) that binds no `self.x` and no `x` of its own."""
    found = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        if any(dotted(base) != "object" for base in cls.bases) or cls.keywords:
            continue
        own = {name for node in cls.body for name in _names_bound(node)}
        if own & {"__getattr__", "__getattribute__", "__slots__"}:
            continue
        reads: list[ast.Attribute] = []
        for node in ast.walk(cls):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and (
                    node.value.id == "self"):
                if isinstance(node.ctx, ast.Load):
                    reads.append(node)
                else:
                    own.add(node.attr)
            elif isinstance(node, ast.Call) and dotted(node.func) in ("setattr", "vars"):
                own.add("*")
        if "*" in own:
            continue
        for read in reads:
            if read.attr not in own:
                own.add(read.attr)  # reported once
                found.append(Problem(read.lineno, read.col_offset + 1,
                                     f"`self.{read.attr}` is never assigned", "unbound"))
    return found


def _names_bound(node: ast.stmt) -> list[str]:
    """The names a class-body statement binds."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    targets = (node.targets if isinstance(node, ast.Assign)
               else [node.target] if isinstance(node, ast.AnnAssign) else [])
    return [sub.id for target in targets for sub in ast.walk(target) if isinstance(sub, ast.Name)]


def _scopes(table: symtable.SymbolTable) -> Iterator[symtable.SymbolTable]:
    for child in table.get_children():
        yield child
        yield from _scopes(child)


def _first_reads(tree: ast.Module, names: set[str]) -> list[ast.Name]:
    """The first read of each of `names`, in source order."""
    first: dict[str, ast.Name] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in names:
            seen = first.get(node.id)
            if seen is None or (node.lineno, node.col_offset) < (seen.lineno, seen.col_offset):
                first[node.id] = node
    return list(first.values())


def none_calls(tree: ast.Module) -> list[Problem]:
    """`x.method(...)` where every assignment to `x` (a name or `self.attribute`, module-wide)
    is `None` and no test in the calling function looks at `x`."""
    values: dict[str, list[bool]] = {}
    for node in ast.walk(tree):
        for target, value in _assignments(node):
            key = dotted(target)
            if key is not None:
                values.setdefault(key, []).append(_is_none(value))
    only_none = {key for key, nones in values.items() if all(nones)}
    found = []
    for nodes in _scopes_of(tree):
        tested = {key for node in nodes for test in _tests(node) for sub in ast.walk(test)
                  if isinstance(sub, ast.Name | ast.Attribute) and (key := dotted(sub))}
        for call in nodes:
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and (key := dotted(call.func.value)) in only_none and key not in tested):
                found.append(Problem(call.lineno, call.col_offset + 1,
                                     f"`{key}.{call.func.attr}()` is called on None",
                                     "none call"))
    return found


def _scopes_of(tree: ast.Module) -> list[list[ast.AST]]:
    """The own nodes of the module and of each function."""
    return [list(_own_nodes(scope)) for scope in [tree, *(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))]]


def _assignments(node: ast.AST) -> list[tuple[ast.expr, ast.expr | None]]:
    if isinstance(node, ast.Assign):
        return [(target, node.value) for target in node.targets]
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        return [(node.target, node.value)]
    return []


def _tests(node: ast.AST) -> list[ast.expr]:
    """The conditions `node` evaluates before running code that depends on them."""
    if isinstance(node, ast.If | ast.While | ast.IfExp | ast.Assert):
        return [node.test]
    if isinstance(node, ast.BoolOp):
        return node.values[:-1]
    return []


def _is_none(value: ast.expr | None) -> bool:
    return isinstance(value, ast.Constant) and value.value is None


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of `scope`, not those of the functions defined in it."""
    pending = list(ast.iter_child_nodes(scope))
    while pending:
        node = pending.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            pending.extend(ast.iter_child_nodes(node))


def restores_without_save(tree: ast.Module) -> list[Problem]:
    """`x.load_state_dict(...)` where nothing calls `x.state_dict()`, for an `x` whose name
    says it is a scaler (`scaler`, `self.grad_scaler`, `loss_scaler`)."""
    saved, restored = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            key = dotted(node.func.value)
            if key is None or "scaler" not in key.rsplit(".", 1)[-1].lower():
                continue
            if node.func.attr == "state_dict":
                saved.add(key)
            elif node.func.attr == "load_state_dict":
                restored.append((key, node))
    return [Problem(node.lineno, node.col_offset + 1,
                    f"`{key}` state restored but never saved", "restore")
            for key, node in restored if key not in saved]
