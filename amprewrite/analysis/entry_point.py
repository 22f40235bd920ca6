"""Where a script starts (for seeding) and the training DataLoaders it builds."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amprewrite.analysis.facts import Block, CallSite, ModuleFacts
from amprewrite.analysis.names import dotted


@dataclass(frozen=True)
class EntryPoint:
    """Where a script starts: the place to seed everything (--reproducible)."""

    block: Block  # where seeding goes: main()'s body, the `__main__` block, or the module
    index: int
    function: cst.FunctionDef | None  # main(), or None at module level


def entry_point(facts: ModuleFacts) -> EntryPoint:
    main = next((f for f in facts.functions if f.name.value == "main"
                 and facts.statements.get(f) is not None
                 and facts.statements[f].parent is None), None)
    if main is not None and isinstance(main.body, cst.IndentedBlock):
        return EntryPoint(main.body, _after_docstring(main.body), main)
    for statement in facts.module.body:
        if isinstance(statement, cst.If) and _is_main_guard(statement.test) and isinstance(
                statement.body, cst.IndentedBlock):
            return EntryPoint(statement.body, 0, None)
    return EntryPoint(facts.module, facts.header_imports_end, None)


def shuffled_loaders(facts: ModuleFacts) -> list[CallSite]:
    """`DataLoader(dataset, shuffle=True, ...)` calls: training loaders to seed."""
    loaders = []
    for site in facts.calls:
        if facts.imports.resolve(site.call.func) != "torch.utils.data.DataLoader":
            continue
        keywords = {a.keyword.value: a for a in site.call.args if a.keyword is not None}
        shuffle = keywords.get("shuffle")
        if shuffle is not None and dotted(shuffle.value) == "True" and not (
                {"generator", "worker_init_fn"} & keywords.keys()):
            loaders.append(site)
    return loaders


def _after_docstring(block: cst.IndentedBlock) -> int:
    first = block.body[0] if block.body else None
    if (isinstance(first, cst.SimpleStatementLine) and isinstance(first.body[0], cst.Expr)
            and isinstance(first.body[0].value, cst.SimpleString | cst.ConcatenatedString)):
        return 1
    return 0


def _is_main_guard(test: cst.BaseExpression) -> bool:
    code = cst.Module([]).code_for_node(test).replace("'", '"')
    return code.replace(" ", "") == '__name__=="__main__"'
