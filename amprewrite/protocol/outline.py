"""One walk over a module's statements, not their expressions: its functions and classes, its
imports, the names each function binds and tests, and which lines may hold a protocol event
(found in the text: most of a training script's lines have nothing to do with AMP)."""

from __future__ import annotations

import ast
import copy
import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import accumulate

from amprewrite.protocol import ir
from amprewrite.protocol.api import OPTIMIZER_CLASSES
from amprewrite.protocol.keys import Imports, key_of

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
BLOCK_FIELDS = ("body", "orelse", "finalbody", "handlers", "cases")

# What a line holds where it may hold a protocol event, besides the names of optimizer classes
# and of the module's functions, classes, scalers and autocast makers. (One alternation of
# plain words: Python's regular expressions slow down a hundredfold with `\b` alternatives.)
EVENT_PATTERN = re.compile(r"backward|\.step\(|zero_grad|\.grad\b|clip_grad|clip_gradient|"
                           r"scale|Scaler|\.update\(|autocast|optim|parameters\(|param_groups|"
                           r"state_dict|\.save\(")


@dataclass
class Class:
    name: str
    bases: tuple[str, ...]  # the keys of its bases (the module's own classes among them)
    methods: dict[str, str] = field(default_factory=dict)  # method name -> qualified name


@dataclass
class Outline:
    tree: ast.Module
    imports: Imports
    functions: dict[str, ir.Function] = field(default_factory=dict)
    classes: dict[str, Class] = field(default_factory=dict)
    assignments: list[ast.Assign | ast.AnnAssign] = field(default_factory=list)
    test_names: set[str] = field(default_factory=set)  # names that if/while tests read


def outline(tree: ast.Module, lines: Interest) -> Outline:
    """The module's outline; the bodies of functions none of whose `lines` may hold an event
    are not read (the checker has nothing to follow there)."""
    result = Outline(tree, Imports())
    module = _Scope(qualname="")
    _Walker(result, lines).block(tree.body, "", None, module)
    result.functions[""] = ir.Function("", tree, None, (), frozenset(), frozenset(module.names),
                                       None)
    return result


class _Walker:
    def __init__(self, outline: Outline, lines: Interest) -> None:
        self.outline = outline
        self.lines = lines

    def block(
        self, body: Iterable[ast.stmt], prefix: str, cls: str | None, function: _Scope | None
    ) -> None:
        for statement in body:
            self.statement(statement, prefix, cls, function)

    def statement(
        self, statement: ast.stmt, prefix: str, cls: str | None, scope: _Scope | None
    ) -> None:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            if scope is not None:
                scope.names.add(statement.name)
            self._function(statement, prefix, cls, scope)
            return
        if isinstance(statement, ast.ClassDef):
            if scope is not None:
                scope.names.add(statement.name)
            qualname = f"{prefix}{statement.name}"
            bases = tuple(key for key in map(key_of, statement.bases) if key is not None)
            self.outline.classes[qualname] = Class(qualname, bases)
            self.block(statement.body, f"{qualname}.", qualname, scope)
            return
        if isinstance(statement, ast.Import | ast.ImportFrom):
            self.outline.imports.add(statement)
            if scope is not None:
                scope.names.update((a.asname or a.name).split(".", 1)[0]
                                   for a in statement.names)
        elif isinstance(statement, ast.Global | ast.Nonlocal):
            if scope is not None:
                scope.declared.update(statement.names)
        elif isinstance(statement, ast.Assign | ast.AnnAssign):
            if statement.value is not None:
                self.outline.assignments.append(statement)
        elif isinstance(statement, ast.If | ast.While):
            names = {n.id for n in subnodes(statement.test) if type(n) is ast.Name}
            self.outline.test_names |= names
            if scope is not None:
                scope.tests.append(statement.test)
        if scope is not None:
            scope.names |= bound_names(statement)
        for name in BLOCK_FIELDS:
            for item in getattr(statement, name, ()):
                if isinstance(item, ast.ExceptHandler):
                    if item.name and scope is not None:
                        scope.names.add(item.name)
                    self.block(item.body, prefix, cls, scope)
                elif isinstance(item, ast.match_case):
                    self.block(item.body, prefix, cls, scope)
                else:
                    self.statement(item, prefix, cls, scope)

    def _function(
        self, node: FunctionNode, prefix: str, cls: str | None, parent: _Scope | None
    ) -> None:
        qualname = f"{prefix}{node.name}"
        if cls is not None:
            self.outline.classes[cls].methods[node.name] = qualname
        scope = _Scope(qualname=qualname)
        parent = parent if parent is not None and parent.qualname else None
        if self.lines.any(node.lineno, node.end_lineno or node.lineno):
            self.block(node.body, f"{qualname}.", None, scope)
        arguments = node.args
        positional = [*arguments.posonlyargs, *arguments.args]
        params = [a.arg for a in positional] + [a.arg for a in arguments.kwonlyargs]
        params += [a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None]
        named = [a.arg for a in positional][len(positional) - len(arguments.defaults):]
        defaults = list(zip(named, arguments.defaults, strict=True))
        defaults += [(a.arg, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults,
                                                strict=True) if d is not None]
        maybe_none = {name for name, default in defaults
                      if isinstance(default, ast.Constant) and default.value is None}
        maybe_none |= _tested_against_none(scope.tests, set(params))
        local = (frozenset(params) | scope.names) - scope.declared
        self.outline.functions[qualname] = ir.Function(
            qualname, node, cls, tuple(params), frozenset(maybe_none), frozenset(local),
            parent.qualname if parent is not None else None)


@dataclass
class _Scope:
    names: set[str] = field(default_factory=set)
    declared: set[str] = field(default_factory=set)
    tests: list[ast.expr] = field(default_factory=list)
    qualname: str | None = None


_BINDS_NOTHING = frozenset({ast.Expr, ast.Return, ast.If, ast.While, ast.Try, ast.Pass,
                            ast.Raise, ast.Break, ast.Continue})


def bound_names(statement: ast.stmt) -> set[str]:
    """The names a statement's own header binds (assignment, loop and with targets)."""
    targets: list[ast.expr] = []
    if type(statement) in _BINDS_NOTHING:  # the most common statements: a quick answer
        return set()
    if isinstance(statement, ast.Assign):
        targets = statement.targets
        if len(targets) == 1 and isinstance(targets[0], ast.Name):
            return {targets[0].id}
    elif isinstance(statement, ast.AugAssign | ast.AnnAssign | ast.For | ast.AsyncFor):
        targets = [statement.target]
    elif isinstance(statement, ast.With | ast.AsyncWith):
        targets = [item.optional_vars for item in statement.items
                   if item.optional_vars is not None]
    return {n.id for target in targets for n in subnodes(target)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _tested_against_none(tests: list[ast.expr], params: set[str]) -> set[str]:
    """Parameters a function tests against None or for truth: it expects None there."""
    found = set()
    for test in tests:
        for part in subnodes(test):
            if isinstance(part, ast.Compare) and isinstance(part.left, ast.Name) and any(
                    isinstance(c, ast.Constant) and c.value is None for c in part.comparators):
                found.add(part.left.id)
        operand = test.operand if isinstance(test, ast.UnaryOp) else test
        if isinstance(operand, ast.Name):
            found.add(operand.id)
    return found & params


# The optimizer classes' names without word boundaries (a superset: `ASGD` holds `SGD`,
# `AdamW` `Adam`), which Python's regular expressions search many times faster
_OPTIMIZER_CLASS_NAMES = re.compile("|".join(sorted(
    {name for name in OPTIMIZER_CLASSES
     if not any(other != name and other in name for other in OPTIMIZER_CLASSES)})))
_WORD = re.compile(r"\w")


class Interest:
    """Which lines of a source may hold an event: those matching `EVENT_PATTERN` or naming
    an optimizer class, or naming one of `names` (the module's functions and classes, its
    scalers), as a whole word."""

    def __init__(self, source: str, names: Iterable[str],
                 pattern: re.Pattern[str] | None = EVENT_PATTERN) -> None:
        self.source = source
        self.starts = [0] + [m.end() for m in re.finditer("\n", source)]
        self.flags = bytearray(len(self.starts) + 1)
        for found in (pattern, _OPTIMIZER_CLASS_NAMES) if pattern is not None else ():
            match = found.search(source)
            while match is not None:  # one hit a line: then on from the next line
                line = bisect_right(self.starts, match.start())
                self.flags[line] = 1
                if line >= len(self.starts):
                    break
                match = found.search(source, self.starts[line])
        self._flag_names(names)
        self.counts = list(accumulate(self.flags))

    def naming(self, names: Iterable[str]) -> Interest:
        """These lines and those naming one of `names` (the pattern is not searched again)."""
        wider = copy.copy(self)
        wider.flags = bytearray(self.flags)
        wider._flag_names(names)
        wider.counts = list(accumulate(wider.flags))
        return wider

    def _flag_names(self, names: Iterable[str]) -> None:
        source, starts, flags = self.source, self.starts, self.flags
        for name in set(names):
            at = source.find(name) if name else -1
            while at != -1:
                end = at + len(name)
                if ((at == 0 or not _WORD.match(source, at - 1))
                        and (end >= len(source) or not _WORD.match(source, end))):
                    line = bisect_right(starts, at)
                    flags[line] = 1
                    if line >= len(starts):
                        break
                    end = starts[line]
                at = source.find(name, end)

    def any(self, first: int, last: int) -> bool:
        """Whether a line in `first`..`last` (1-based, inclusive) mentions a word."""
        return self.counts[min(last, len(self.counts) - 1)] > self.counts[first - 1]

    def statement(self, statement: ast.stmt) -> bool:
        """Whether a statement's own lines (a compound statement's header) mention one."""
        last = statement.end_lineno or statement.lineno
        inner = next(iter(getattr(statement, "body", ()) or ()), None)
        if isinstance(inner, ast.stmt) and not isinstance(statement, ast.ExceptHandler):
            last = max(statement.lineno, inner.lineno - 1)
        return self.any(statement.lineno, last)


DEFINITION = re.compile(r"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)", re.MULTILINE)


def subnodes(node: ast.AST) -> Iterator[ast.AST]:
    """`node` and every node under it, lambdas' bodies left out (faster than `ast.walk`)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        for name in current._fields:
            value = getattr(current, name, None)
            if type(value) is list:
                stack.extend(v for v in value if isinstance(v, ast.AST)
                             and type(v) is not ast.Lambda)
            elif isinstance(value, ast.AST) and type(value) is not ast.Lambda:
                stack.append(value)


def walk_statements(body: Iterable[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of a block and of the blocks nested in it, not entering definitions."""
    for statement in body:
        yield statement
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for name in BLOCK_FIELDS:
            for item in getattr(statement, name, ()):
                if isinstance(item, ast.ExceptHandler | ast.match_case):
                    yield from walk_statements(item.body)
                else:
                    yield from walk_statements([item])
