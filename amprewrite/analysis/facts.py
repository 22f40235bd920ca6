"""One pass over a module that records the structural facts every analysis needs.

Nothing here interprets PyTorch: it indexes statements (which block, which position, which
enclosing function/class), imports, calls, assignments and every name used.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import libcst as cst

from amprewrite.analysis.names import ImportTable, target_keys
from amprewrite.analysis.tree import children, node_types
from amprewrite.codegen import render

Block = cst.Module | cst.IndentedBlock
Statement = cst.SimpleStatementLine | cst.BaseCompoundStatement
SmallContainer = cst.SimpleStatementLine | cst.SimpleStatementSuite


@dataclass(frozen=True)
class StatementInfo:
    """Where a statement sits: its block, its index there, and what encloses it."""

    block: Block
    index: int
    parent: cst.BaseCompoundStatement | None  # the compound statement owning `block`
    function: cst.FunctionDef | None


@dataclass(frozen=True)
class CallSite:
    """A call and the statements and function around it."""

    call: cst.Call
    statement: Statement  # the block-level statement containing the call
    small: cst.BaseSmallStatement | None  # the small statement containing it, if any
    function: cst.FunctionDef | None


@dataclass(frozen=True)
class Binding:
    """`target = value` (or `target: T = value`) with a call or name on the right."""

    keys: tuple[str, ...]
    value: cst.BaseExpression
    statement: Statement
    function: cst.FunctionDef | None


def body(block: Block) -> Sequence[Statement]:
    """The statements of `block` (libcst types them as the `BaseStatement` both derive from)."""
    return block.body  # type: ignore[return-value]


SHORTEST_LINE_LIMIT = 79  # PEP 8


@dataclass
class ModuleFacts:
    """The structural facts of a module, collected in one walk."""

    module: cst.Module
    imports: ImportTable = field(default_factory=ImportTable)
    statements: dict[Statement, StatementInfo] = field(default_factory=dict)
    small_containers: dict[cst.BaseSmallStatement, SmallContainer] = field(default_factory=dict)
    calls: list[CallSite] = field(default_factory=list)
    bindings: list[Binding] = field(default_factory=list)
    functions: list[cst.FunctionDef] = field(default_factory=list)
    function_class: dict[cst.FunctionDef, cst.ClassDef] = field(default_factory=dict)
    classes: list[cst.ClassDef] = field(default_factory=list)
    loops: list[cst.For | cst.CompFor] = field(default_factory=list)  # `for` statements and clauses
    names: set[str] = field(default_factory=set)
    bare_names: set[str] = field(default_factory=set)  # names not after a dot (`x`, not `a.x`)
    strings: set[str] = field(default_factory=set)  # values of plain string literals
    order: dict[Statement, int] = field(default_factory=dict)  # pre-order (source) position
    owner: dict[int, Statement] = field(default_factory=dict)  # id(node) -> its statement
    header_imports_end: int = 0  # index in module.body after the leading imports
    source: bytes | None = None  # what the module was parsed from, when known

    @cached_property
    def code(self) -> str:
        """The module's text: its source when known, else rendered (a full codegen pass)."""
        if self.source is not None:
            return self.source.decode(self.module.encoding)
        return self.module.code

    @cached_property
    def line_limit(self) -> int:
        """The file's line-length convention: its longest line, at least PEP 8's 79 (a file
        whose lines are all shorter still wraps beyond it)."""
        return max(SHORTEST_LINE_LIMIT, *(len(line.expandtabs())
                                          for line in self.code.splitlines()))

    def indentation(self, statement: Statement) -> int:
        """The width of `statement`'s indentation, in columns."""
        depth = len(self.enclosing_statements(statement)) - 1
        return depth * len(self.module.default_indent.expandtabs())

    def method(self, cls: cst.ClassDef, name: str) -> cst.FunctionDef | None:
        """The method `name` that `cls` defines, if it does."""
        return next((f for f in self.functions if self.function_class.get(f) is cls
                     and f.name.value == name), None)

    def init_of(self, cls: cst.ClassDef) -> cst.FunctionDef | None:
        """`cls.__init__`, when the class defines one."""
        return self.method(cls, "__init__")

    def init_bindings(self, cls: cst.ClassDef) -> list[Binding]:
        """The assignments of `cls.__init__`."""
        init = self.init_of(cls)
        return [] if init is None else [b for b in self.bindings if b.function is init]

    def stored_parameters(self, cls: cst.ClassDef) -> dict[str, str]:
        """`self.optimizer` -> `optimizer`: the attributes `cls.__init__` sets from its
        parameters, and those parameters."""
        init = self.init_of(cls)
        if init is None:
            return {}
        positional, keyword_only = self.parameters(init)
        parameters = set(positional + keyword_only)
        return {key: binding.value.value for binding in self.init_bindings(cls)
                if isinstance(binding.value, cst.Name) and binding.value.value in parameters
                for key in binding.keys if key.startswith("self.")}

    def one_line(self, node: cst.CSTNode) -> str:
        """The code of `node` with its whitespace folded, as messages quote it."""
        return " ".join(render(node, self.module).split())

    def statements_around(self, node: cst.CSTNode) -> list[Statement]:
        """The statements that contain `node` (itself, if it is one), innermost first."""
        if isinstance(node, cst.IndentedBlock):
            node = node.body[0] if node.body else node
        statement = node if node in self.statements else self.owner.get(id(node))
        return [] if statement is None else self.enclosing_statements(statement)

    def enclosing_statements(self, statement: Statement) -> list[Statement]:
        """`statement` and every compound statement around it, innermost first."""
        chain: list[Statement] = [statement]
        info = self.statements.get(statement)
        while info is not None and info.parent is not None:
            chain.append(info.parent)
            info = self.statements.get(info.parent)
        return chain

    def enclosing_loop(self, statement: Statement) -> cst.For | cst.While | None:
        for outer in self.enclosing_statements(statement)[1:]:
            if isinstance(outer, cst.FunctionDef | cst.ClassDef):
                return None
            if isinstance(outer, cst.For | cst.While):
                return outer
        return None

    def parameters(self, function: cst.FunctionDef) -> tuple[list[str], list[str]]:
        """`function`'s positional parameters (without a method's `self`/`cls`) and its
        keyword-only ones, by name."""
        params = function.params
        positional = [p.name.value for p in (*params.posonly_params, *params.params)]
        if function in self.function_class and not any(
            isinstance(d.decorator, cst.Name) and d.decorator.value == "staticmethod"
            for d in function.decorators
        ):
            positional = positional[1:]
        return positional, [p.name.value for p in params.kwonly_params]

    def position(self, statement: Statement) -> tuple[Block, int]:
        info = self.statements[statement]
        return info.block, info.index


_STATEMENTS = node_types(cst.SimpleStatementLine) | node_types(cst.BaseCompoundStatement)
_SMALL_STATEMENTS = node_types(cst.BaseSmallStatement)


class _Collector:
    """One recursive walk that fills a ModuleFacts (`_visit_<Type>` methods see each node on
    the way down)."""

    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self.statement_stack: list[Statement] = []
        self.small_stack: list[cst.BaseSmallStatement] = []
        self.function_stack: list[cst.FunctionDef] = []
        self.class_stack: list[cst.ClassDef | None] = [None]
        self.attribute_names: set[int] = set()  # id() of the Name after each dot

    def walk(self, node: cst.CSTNode) -> None:
        if self.statement_stack:
            self.facts.owner[id(node)] = self.statement_stack[-1]
        kind = type(node)
        is_statement = kind in _STATEMENTS
        if is_statement:
            self.statement_stack.append(node)  # type: ignore[arg-type]
            self.facts.order[node] = len(self.facts.order)  # type: ignore[index]
        is_small = kind in _SMALL_STATEMENTS
        if is_small:
            self.small_stack.append(node)  # type: ignore[arg-type]
        visit = _VISITS.get(kind)
        if visit is not None:
            visit(self, node)
        for child in children(node):
            self.walk(child)
        if kind is cst.FunctionDef:
            self.function_stack.pop()
            self.class_stack.pop()
        elif kind is cst.ClassDef:
            self.class_stack.pop()
        if is_statement:
            self.statement_stack.pop()
        if is_small:
            self.small_stack.pop()

    # Blocks and statements -------------------------------------------------------------
    def _visit_Module(self, node: cst.Module) -> None:
        self._index_block(node, None)

    def _visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        parent = self.statement_stack[-1] if self.statement_stack else None
        assert parent is None or isinstance(parent, cst.BaseCompoundStatement)
        self._index_block(node, parent)

    def _index_block(self, block: Block, parent: cst.BaseCompoundStatement | None) -> None:
        function = self.function_stack[-1] if self.function_stack else None
        for index, statement in enumerate(block.body):
            self.facts.statements[statement] = StatementInfo(block, index, parent, function)

    def _visit_If(self, node: cst.If) -> None:
        # An `elif` is an If inside `orelse`: index it as a child of the If it continues.
        if isinstance(node.orelse, cst.If):
            outer = self.facts.statements.get(node)
            if outer is not None:
                self.facts.statements[node.orelse] = StatementInfo(
                    outer.block, outer.index, node, outer.function
                )

    def _visit_SimpleStatementLine(self, node: SmallContainer) -> None:
        for small in node.body:
            self.facts.small_containers[small] = node

    _visit_SimpleStatementSuite = _visit_SimpleStatementLine

    def _visit_For(self, node: cst.For | cst.CompFor) -> None:
        self.facts.loops.append(node)

    _visit_CompFor = _visit_For

    # Scopes (left again at the end of `walk`) ----------------------------------------------
    def _visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.facts.functions.append(node)
        owner = self.class_stack[-1]
        if owner is not None:
            self.facts.function_class[node] = owner
        self.function_stack.append(node)
        self.class_stack.append(None)
        self.facts.names.add(node.name.value)

    def _visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.facts.classes.append(node)
        self.class_stack.append(node)
        self.facts.names.add(node.name.value)

    # Facts ----------------------------------------------------------------------------------
    def _visit_Import(self, node: cst.Import | cst.ImportFrom) -> None:
        self.facts.imports.add(node)

    _visit_ImportFrom = _visit_Import

    def _visit_Name(self, node: cst.Name) -> None:
        self.facts.names.add(node.value)
        if id(node) not in self.attribute_names:
            self.facts.bare_names.add(node.value)

    def _visit_Attribute(self, node: cst.Attribute) -> None:
        self.attribute_names.add(id(node.attr))

    def _visit_SimpleString(self, node: cst.SimpleString) -> None:
        value = node.evaluated_value
        if isinstance(value, str) and len(value) < 64:
            self.facts.strings.add(value)

    def _visit_Call(self, node: cst.Call) -> None:
        if not self.statement_stack:
            return
        self.facts.calls.append(
            CallSite(
                node,
                self.statement_stack[-1],
                self.small_stack[-1] if self.small_stack else None,
                self.function_stack[-1] if self.function_stack else None,
            )
        )

    def _visit_Assign(self, node: cst.Assign) -> None:
        keys = tuple(k for t in node.targets for k in target_keys(t.target))
        self._bind(keys, node.value)

    def _visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._bind(tuple(target_keys(node.target)), node.value)

    def _bind(self, keys: tuple[str, ...], value: cst.BaseExpression) -> None:
        if keys and self.statement_stack:
            function = self.function_stack[-1] if self.function_stack else None
            self.facts.bindings.append(Binding(keys, value, self.statement_stack[-1], function))


_VISITS: dict[type, Callable[[_Collector, Any], None]] = {
    getattr(cst, name.removeprefix("_visit_")): method
    for name, method in vars(_Collector).items() if name.startswith("_visit_")
}


def collect(module: cst.Module, source: bytes | None = None) -> ModuleFacts:
    """The facts of `module`; `source`, the bytes it was parsed from (or rendered as), saves
    rendering it again where its text is needed."""
    facts = ModuleFacts(module, source=source)
    _Collector(facts).walk(module)
    facts.header_imports_end = _header_imports_end(module)
    return facts


def _header_imports_end(module: cst.Module) -> int:
    """Index just after the last import of the module's leading docstring/import block."""
    end = 0
    for index, statement in enumerate(module.body):
        if _is_header(statement, index):
            if _has_import(statement):
                end = index + 1
            elif index == 0:
                end = 1  # docstring
            continue
        break
    return end


def _is_header(statement: Statement, index: int) -> bool:
    if isinstance(statement, cst.SimpleStatementLine):
        return all(
            isinstance(small, cst.Import | cst.ImportFrom)
            or (index == 0 and isinstance(small, cst.Expr)
                and isinstance(small.value, cst.SimpleString | cst.ConcatenatedString))
            for small in statement.body
        )
    # `try: import x / except ImportError: ...` blocks belong to the import header too.
    return isinstance(statement, cst.Try) and _has_import(statement)


def _has_import(statement: Statement) -> bool:
    return any(
        isinstance(small, cst.Import | cst.ImportFrom)
        for line in _lines(statement)
        for small in line.body
    )


def _lines(statement: Statement) -> list[cst.SimpleStatementLine]:
    if isinstance(statement, cst.SimpleStatementLine):
        return [statement]
    if isinstance(statement, cst.Try):
        return [s for s in statement.body.body if isinstance(s, cst.SimpleStatementLine)]
    return []
