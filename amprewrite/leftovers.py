"""What a partial plan leaves behind once some of its edits are undone or withheld: imports
the rewrite added that nothing uses any more, or nothing but such lines."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis.facts import Statement
from amprewrite.transform import Insert

if TYPE_CHECKING:
    from amprewrite.verification import EditSite


def unused_added_imports(output: ast.Module, source: ast.Module) -> set[str]:
    """The names the output's module-level imports bind that the source's do not and that
    nothing in the output reads."""
    added = _imported(output) - _imported(source)
    if not added:
        return set()
    read = {node.id for node in ast.walk(output) if isinstance(node, ast.Name)}
    return added - read


def without_imports(sites: Sequence[EditSite], names: set[str]) -> list[EditSite]:
    """`sites` with the imports of `names` taken out of the statements they insert."""
    kept = []
    for site in sites:
        edit = site.edit
        if isinstance(edit, Insert):
            statements = [s for s in (_less(s, names) for s in edit.statements) if s is not None]
            if not statements:
                continue
            site = dataclasses.replace(site, edit=dataclasses.replace(edit, statements=statements))
        kept.append(site)
    return kept


def same_program(output: ast.Module, source: ast.Module) -> bool:
    """Whether the two trees are the same program (comments and layout aside)."""
    return ast.dump(output) == ast.dump(source)


def _imported(tree: ast.Module) -> set[str]:
    names = set()
    for statement in tree.body:
        if isinstance(statement, ast.Import | ast.ImportFrom):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in statement.names}
    return names


def _less(statement: Statement, names: set[str]) -> Statement | None:
    """An import statement without the aliases binding `names` (None: none left)."""
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Import | cst.ImportFrom)):
        return statement
    imported = statement.body[0]
    if isinstance(imported.names, cst.ImportStar):
        return statement
    aliases = [a for a in imported.names if _bound(a) not in names]
    if len(aliases) == len(imported.names):
        return statement
    if not aliases:
        return None
    aliases[-1] = aliases[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return statement.with_changes(body=[imported.with_changes(names=aliases)])


def _bound(alias: cst.ImportAlias) -> str:
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    node: cst.BaseExpression = alias.name
    while isinstance(node, cst.Attribute):
        node = node.value
    return node.value if isinstance(node, cst.Name) else ""
