"""Names in source: dotted keys of expressions, imports, and what statements read and bind.

A *key* is the dotted text of a Name/Attribute chain (`loss`, `self.optimizer`, `args.lr`).
Keys identify variables without scope analysis, which is precise enough for training scripts
and an order of magnitude cheaper than libcst's ScopeProvider.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis.tree import children
from amprewrite.codegen import render


def dotted(node: cst.CSTNode) -> str | None:
    """`a.b.c` for a Name/Attribute chain, else None."""
    if type(node) is cst.Name:
        return node.value
    if type(node) is cst.Attribute:
        base = dotted(node.value)
        return None if base is None else f"{base}.{node.attr.value}"
    return None


def duplicable(node: cst.BaseExpression) -> bool:
    """An expression cheap and safe to read twice (`scores`, `self.bias`, `attn[:, 0]`)."""
    if type(node) is cst.Subscript:
        return duplicable(node.value)
    return dotted(node) is not None


def receiver_key(node: cst.BaseExpression) -> str | None:
    """Key of a call receiver: a dotted chain, or a subscripted one (`optimizers[0]`)."""
    key = dotted(node)
    if key is not None:
        return key
    if type(node) is cst.Subscript:
        base = receiver_key(node.value)
        if base is not None:
            return f"{base}[{_index_code(node.slice[0])}]"
    return None


_BARE_MODULE = cst.Module([])


def _index_code(element: cst.SubscriptElement) -> str:
    """The code of a subscript's first element: a plain name or number (`optimizers[0]`,
    most of them) read off the node, anything else rendered."""
    index = element.slice
    if type(index) is cst.Index and index.star is None and (
            element.comma is cst.MaybeSentinel.DEFAULT):
        value = index.value
        if (type(value) is cst.Integer or type(value) is cst.Name) and not (
                value.lpar or value.rpar):
            return value.value
    return render(element, _BARE_MODULE)


class ImportTable:
    """Maps locally bound import names to the dotted path they stand for."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}
        # Relative imports, kept apart (`.engine.train`): only a project's resolution uses them.
        self.relative: dict[str, str] = {}

    def add(self, node: cst.Import | cst.ImportFrom) -> None:
        if isinstance(node, cst.Import):
            for alias in node.names:
                full = dotted(alias.name) or ""
                if alias.asname is not None:
                    self.aliases[_asname(alias)] = full
                else:
                    top = full.split(".")[0]
                    self.aliases[top] = top
            return
        if isinstance(node.names, cst.ImportStar) or (node.module is None and not node.relative):
            return
        module = (dotted(node.module) or "") if node.module is not None else ""
        dots = "." * len(node.relative)
        table = self.relative if dots else self.aliases
        for alias in node.names:
            name = dotted(alias.name) or ""
            local = _asname(alias) if alias.asname is not None else name
            table[local] = f"{dots}{module}.{name}" if module else f"{dots}{name}"

    def resolve(self, node: cst.CSTNode) -> str | None:
        """Qualified dotted name of an expression built on an imported name, else None."""
        key = dotted(node)
        if key is None:
            return None
        head, _, rest = key.partition(".")
        target = self.aliases.get(head)
        if target is None:
            return None
        return f"{target}.{rest}" if rest else target

    def resolve_in_project(self, node: cst.CSTNode) -> str | None:
        """Like `resolve`, relative imports included (`.engine.train_one_epoch`)."""
        key = dotted(node)
        if key is None:
            return None
        head, _, rest = key.partition(".")
        target = self.aliases.get(head) or self.relative.get(head)
        if target is None:
            return None
        return f"{target}.{rest}" if rest else target

    def local_name_for(self, qualified: str) -> str | None:
        """A local expression that reaches `qualified` (e.g. `torch`), if one is imported."""
        for local, target in self.aliases.items():
            if target == qualified:
                return local
            if qualified.startswith(target + "."):
                return local + qualified[len(target):]
        return None


def _asname(alias: cst.ImportAlias) -> str:
    assert alias.asname is not None
    return dotted(alias.asname.name) or ""


def iter_keys(node: cst.CSTNode) -> Iterator[str]:
    """Every maximal dotted chain read inside `node` (`self.model(x.y)` -> self.model, x.y)."""
    stack = [node]
    while stack:
        current = stack.pop()
        key = dotted(current)
        if key is not None:
            yield key
            # `a.b` also reads `a`: a statement defining `a` feeds `a.b`.
            while "." in key:
                key = key.rsplit(".", 1)[0]
                yield key
            continue
        stack.extend(children(current))


def target_keys(target: cst.BaseExpression) -> Iterator[str]:
    """Keys bound by an assignment target (names, attributes, tuples, starred, subscripts)."""
    if type(target) is cst.Tuple or type(target) is cst.List:
        for element in target.elements:
            yield from target_keys(element.value)
    elif type(target) is cst.StarredElement:
        yield from target_keys(target.value)
    elif type(target) is cst.Subscript:
        # `losses["total"] = ...` updates the container `losses`.
        key = receiver_key(target.value)
        if key is not None:
            yield key
    else:
        key = dotted(target)
        if key is not None:
            yield key


def bound_keys(statement: cst.CSTNode) -> set[str]:
    """Keys that a statement (simple or compound, searched deeply) binds or updates in place."""
    keys: set[str] = set()
    for node in walk(statement):
        if type(node) is cst.Assign:
            for target in node.targets:
                keys.update(target_keys(target.target))
        elif type(node) is cst.AnnAssign or type(node) is cst.AugAssign or type(
                node) is cst.For:
            keys.update(target_keys(node.target))
        elif type(node) is cst.WithItem and node.asname is not None:
            keys.update(target_keys(node.asname.name))
        elif type(node) is cst.NamedExpr:
            keys.update(target_keys(node.target))
        elif type(node) is cst.Call and type(node.func) is cst.Attribute:
            # In-place tensor/container updates: `loss.add_(x)`, `losses.append(l)`.
            method = node.func.attr.value
            if method.endswith("_") or method in _MUTATING_METHODS:
                key = receiver_key(node.func.value)
                if key is not None:
                    keys.add(key)
    return keys


_MUTATING_METHODS = frozenset({"append", "extend", "update", "insert", "setdefault"})


# Concrete node classes, compared by type: isinstance on libcst's ABC-based nodes goes through
# ABCMeta.__instancecheck__, a hot spot of every walk.
_SCOPES = frozenset({cst.FunctionDef, cst.ClassDef, cst.Lambda})


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Every node under `node` (in no particular order), not entering nested scopes."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if type(current) not in _SCOPES or current is node:
            stack.extend(children(current))


@dataclass
class FreshNames:
    """Hands out names the module does not use, each at most once per rewrite."""

    taken: set[str]
    given: set[str] = field(default_factory=set)

    def fresh(self, candidates: tuple[str, ...]) -> str:
        """The first free candidate, else the first with the lowest free suffix (`loss_2`)."""
        for name in candidates:
            if name not in self.taken and name not in self.given:
                return self._give(name)
        counter = 2
        while f"{candidates[0]}_{counter}" in self.taken | self.given:
            counter += 1
        return self._give(f"{candidates[0]}_{counter}")

    def _give(self, name: str) -> str:
        self.given.add(name)
        return name
