"""What the checker knows of a module before it follows any path: which keys are grad
scalers, optimizers (and over which models), schedulers, autocast makers and instances of the
module's classes. Keys are read module-wide, as the code spells them."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from amprewrite.protocol import ir
from amprewrite.protocol.api import (
    AUTOCASTS,
    NOT_OPTIMIZERS,
    OPTIMIZER_CLASSES,
    SCALER_CLASSES,
    optimizer_named,
)
from amprewrite.protocol.keys import Imports, key_of, last_name, root_of
from amprewrite.protocol.outline import (
    BLOCK_FIELDS,
    DEFINITION,
    Class,
    Interest,
    Outline,
    outline,
    subnodes,
    walk_statements,
)

_SCALER_NAME = re.compile("scaler", re.IGNORECASE)
_SCALE = re.compile("[sS]cale")
_PARTIALS = frozenset({"functools.partial", "partial"})


@dataclass
class Program:
    outline: Outline
    interest: Interest  # the lines that may hold an event
    scalers: set[str] = field(default_factory=set)
    optimizers: dict[str, frozenset[str] | None] = field(default_factory=dict)  # -> models
    not_optimizers: set[str] = field(default_factory=set)  # schedulers
    autocast_makers: set[str] = field(default_factory=set)  # `amp_autocast = partial(...)`
    autocast_values: set[str] = field(default_factory=set)  # `ctx = torch.autocast(...)`
    instances: dict[str, str] = field(default_factory=dict)  # key -> class of the module
    # a collection of optimizers built here -> how its elements are named after its key
    # (`optimizers` -> `[0]`, `[1]`; `optims` -> `.g`, `['g']`)
    collections: dict[str, list[str]] = field(default_factory=dict)

    @property
    def functions(self) -> dict[str, ir.Function]:
        return self.outline.functions

    @property
    def classes(self) -> dict[str, Class]:
        return self.outline.classes

    @property
    def imports(self) -> Imports:
        return self.outline.imports

    @property
    def test_names(self) -> set[str]:
        return self.outline.test_names

    def is_optimizer(self, key: str) -> bool:
        if key in self.scalers or key in self.not_optimizers:
            return False
        return key in self.optimizers or optimizer_named(key)

    def method(self, cls: str, name: str) -> str | None:
        """The qualified name of method `name` of class `cls` or of its module bases."""
        seen: set[str] = set()
        todo = [cls]
        classes = self.classes
        while todo:
            current = todo.pop(0)
            if current in seen or current not in classes:
                continue
            seen.add(current)
            found = classes[current].methods.get(name)
            if found is not None:
                return found
            todo.extend(classes[current].bases)
        return None


def program_of(tree: ast.Module, source: str) -> Program:
    rough = Interest(source, DEFINITION.findall(source))
    found = outline(tree, rough)
    program = Program(found, rough)
    for assignment in found.assignments:
        if assignment.value is None or not rough.statement(assignment):
            continue
        targets = assignment.targets if isinstance(assignment, ast.Assign) else [
            assignment.target]
        for target in targets:
            key = key_of(target)
            if key is not None:
                _classify_assignment(program, key, assignment.value)
    _collect_calls(program, Interest(source, (), _SCALE))
    keys = [*program.scalers, *program.autocast_makers, *program.autocast_values]
    # `rough` names every function and class defined (`def`/`class` lines) already
    program.interest = rough.naming(root_of(key) for key in keys)
    return program


def own_expressions(statement: ast.stmt) -> Iterator[ast.AST]:
    """The expressions of a statement's own lines (a compound statement's header)."""
    for name, value in ast.iter_fields(statement):
        if name in BLOCK_FIELDS or name == "decorator_list":
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, ast.AST):
                yield item


def _collect_calls(program: Program, lines: Interest) -> None:
    """Scalers known by their calls (`x.unscale_(opt)`, `x.scale(loss).backward()`, a name
    saying scaler), and the optimizers they step: on `lines`, those that say `scale`."""
    step_targets: list[tuple[str, str]] = []
    named: set[str] = set()
    for function in program.functions.values():
        definition = function.node
        if not isinstance(definition, ast.Module) and not lines.any(
                definition.lineno, definition.end_lineno or definition.lineno):
            continue
        for statement in walk_statements(definition.body):
            if not lines.statement(statement):
                continue
            for expression in own_expressions(statement):
                for node in subnodes(expression):
                    if type(node) is ast.Call and type(node.func) is ast.Attribute:
                        _classify_call(program, node, step_targets, named)
    program.scalers |= named
    for scaler, optimizer in step_targets:
        if scaler in program.scalers:
            program.optimizers.setdefault(optimizer, None)


def _classify_call(
    program: Program, node: ast.Call, step_targets: list[tuple[str, str]], named: set[str]
) -> None:
    assert isinstance(node.func, ast.Attribute)
    method = node.func.attr
    for keyword in node.keywords:
        if keyword.arg == "enabled":
            program.test_names.update(
                n.id for n in subnodes(keyword.value) if isinstance(n, ast.Name))
    scaler = scale_call(node.func.value)
    if method == "backward" and scaler is not None:
        program.scalers.add(scaler)
    receiver = key_of(node.func.value)
    if receiver is None:
        return
    if method == "unscale_":
        program.scalers.add(receiver)
    if method in ("scale", "step", "update", "unscale_") and _SCALER_NAME.search(
            receiver.rsplit(".", 1)[-1]):
        named.add(receiver)
    if method in ("step", "unscale_") and node.args:
        argument = key_of(node.args[0])
        if argument is not None:
            step_targets.append((receiver, argument))


def scale_call(node: ast.expr) -> str | None:
    """The receiver of `X.scale(...)`."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "scale"):
        return key_of(node.func.value)
    return None


def _classify_assignment(program: Program, key: str, value: ast.expr) -> None:
    built = collection_of_optimizers(value, program)
    if built:
        program.optimizers[f"{key}[*]"] = union_owners(list(built.values()), program)
        program.collections[key] = list(built)
        for name, call in built.items():
            program.optimizers[f"{key}{name}"] = parameter_owners(call, program)
    for candidate in alternatives(value):
        if not isinstance(candidate, ast.Call):
            if program.imports.resolve(candidate) in AUTOCASTS:
                program.autocast_makers.add(key)  # `autocast = torch.autocast`
            continue
        qualified = program.imports.resolve(candidate.func)
        name = last_name(qualified)
        if name in SCALER_CLASSES:
            program.scalers.add(key)
        elif qualified in AUTOCASTS:
            program.autocast_values.add(key)
        elif qualified in _PARTIALS and candidate.args and program.imports.resolve(
                candidate.args[0]) in AUTOCASTS:
            program.autocast_makers.add(key)
        elif qualified is not None and NOT_OPTIMIZERS.match(qualified):
            program.not_optimizers.add(key)
        elif is_optimizer_class(qualified, name):
            program.optimizers[key] = parameter_owners(candidate, program)
        elif qualified is not None and qualified in program.classes:
            program.instances[key] = qualified


_NAMESPACES = frozenset({"SimpleNamespace", "EasyDict", "edict", "AttrDict", "AttributeDict",
                         "Munch", "DefaultMunch", "Box", "DotMap", "DotDict", "dotdict",
                         "ConfigDict", "dict"})


def collection_of_optimizers(value: ast.expr, program: Program) -> dict[str, ast.Call]:
    """The optimizers built in a list, tuple or dict literal, or in a namespace's keyword
    arguments (`[Adam(g.parameters()), ...]`, `{"g": Adam(...)}`, `SimpleNamespace(g=Adam(
    ...))`), by how one element is named after the collection's key (`[0]`, `['g']`, `.g`);
    empty if it holds anything else."""
    if isinstance(value, ast.List | ast.Tuple):
        named = {f"[{i}]": item for i, item in enumerate(value.elts)}
    elif isinstance(value, ast.Dict):
        named = {f"[{k.value!r}]": item for k, item in zip(value.keys, value.values, strict=True)
                 if isinstance(k, ast.Constant)}
        if len(named) != len(value.keys):
            return {}
    elif isinstance(value, ast.Call) and last_name(
            program.imports.resolve(value.func)) in _NAMESPACES and not value.args:
        named = {f".{k.arg}": k.value for k in value.keywords if k.arg is not None}
        named |= {f"[{k.arg!r}]": k.value for k in value.keywords if k.arg is not None}
        if len(value.keywords) * 2 != len(named):
            return {}
    else:
        return {}
    calls = {name: item for name, item in named.items() if isinstance(item, ast.Call)
             and is_optimizer_class(program.imports.resolve(item.func),
                                    last_name(program.imports.resolve(item.func)))}
    return calls if calls and len(calls) == len(named) else {}


def union_owners(calls: list[ast.Call], program: Program) -> frozenset[str] | None:
    owners: set[str] = set()
    for call in calls:
        found = parameter_owners(call, program)
        if found is None:
            return None
        owners |= found
    return frozenset(owners)


def is_optimizer_class(qualified: str | None, name: str) -> bool:
    if qualified is None:
        return False
    return ((qualified.startswith("torch.optim.") and not NOT_OPTIMIZERS.match(qualified))
            or name in OPTIMIZER_CLASSES or name.endswith("Optimizer"))


def alternatives(value: ast.expr) -> Iterator[ast.expr]:
    if isinstance(value, ast.IfExp):
        yield from alternatives(value.body)
        yield from alternatives(value.orelse)
    else:
        yield value


def parameter_owners(call: ast.Call, program: Program) -> frozenset[str] | None:
    """The models whose parameters an optimizer is built from (`Adam(model.parameters())`,
    a chain or parameter groups of several); None where they cannot be read off the call."""
    owners = set()
    for part in subnodes(call):
        if (isinstance(part, ast.Call) and isinstance(part.func, ast.Attribute)
                and part.func.attr in ("parameters", "named_parameters")):
            owner = key_of(part.func.value)
            if owner is None:
                return None
            owners.add(owner)
    return frozenset(owners) or None


def _names(node: ast.expr) -> set[str]:
    return {n.id for n in subnodes(node) if isinstance(n, ast.Name)}


def cond_of(node: ast.expr) -> ir.Cond | None:
    """A condition the checker can correlate: names, attributes, constant subscripts, and
    comparisons of those with constants; not calls."""
    for part in subnodes(node):
        if not isinstance(part, ast.Name | ast.Attribute | ast.Subscript | ast.Constant
                          | ast.Compare | ast.Load | ast.cmpop | ast.UnaryOp | ast.Not):
            return None
    text = key_of(node) or ast.unparse(node)
    return ir.Cond(text, frozenset(root_of(k) for k in _names(node)))
