"""Mutants of a correct AMP program: each breaks exactly one invariant of the protocol with a
small AST edit at one site, for the protocol checker to reject (tests/test_generated_programs.py).

`MUTATIONS[name]` is the codes the checker must report for it and a function that lists the
mutants of a program, one per site the mutation applies to (none: it does not apply there).
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass

Block = list[ast.stmt]


@dataclass(frozen=True)
class Mutation:
    codes: frozenset[str]  # the checker reports at least one of them
    mutants: Callable[[str], list[str]]


def _blocks(tree: ast.AST) -> Iterator[Block]:
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block


Chosen = Callable[[Block, int], bool]  # whether the statement at that index is a site


def _found(tree: ast.AST, chosen: Chosen) -> list[tuple[Block, int]]:
    return [(block, i) for block in _blocks(tree) for i in range(len(block)) if chosen(block, i)]


def _each_site(source: str, chosen: Chosen, edit: Callable[[Block, int], None]) -> list[str]:
    """The source with `edit` applied at one chosen statement, for each of them."""
    mutants = []
    for k in range(len(_found(ast.parse(source), chosen))):
        tree = ast.parse(source)
        edit(*_found(tree, chosen)[k])
        mutants.append(ast.unparse(ast.fix_missing_locations(tree)))
    return mutants


def _statement(test: Callable[[ast.stmt], bool]) -> Chosen:
    return lambda block, index: test(block[index])


def _call(statement: ast.stmt) -> ast.Call | None:
    if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        return statement.value
    return None


def _method(statement: ast.stmt, *names: str) -> bool:
    """`X.name(...)` as a statement, X a grad scaler (its name says so)."""
    call = _call(statement)
    return (call is not None and isinstance(call.func, ast.Attribute)
            and call.func.attr in names and "scaler" in ast.unparse(call.func.value).lower())


def _scaled_backward(statement: ast.stmt) -> bool:
    call = _call(statement)
    return call is not None and ("backward" in ast.unparse(call.func)
                                 and ".scale(" in ast.unparse(call))


def _unscale_calls(node: ast.AST) -> None:
    """`scaler.scale(loss)` becomes `loss`, wherever it is in `node`."""
    for parent in ast.walk(node):
        for name, value in ast.iter_fields(parent):
            items = value if isinstance(value, list) else [value]
            for index, item in enumerate(items):
                if (isinstance(item, ast.Call) and isinstance(item.func, ast.Attribute)
                        and item.func.attr == "scale" and item.args):
                    if isinstance(value, list):
                        value[index] = item.args[0]
                    else:
                        setattr(parent, name, item.args[0])


def _delete(block: Block, index: int) -> None:
    del block[index]
    if not block:
        block.append(ast.Pass())


def drop_unscale(source: str) -> list[str]:
    return _each_site(source, _statement(lambda s: _method(s, "unscale_")), _delete)


def unscale_twice(source: str) -> list[str]:
    return _each_site(source, _statement(lambda s: _method(s, "unscale_")),
                      lambda block, i: block.insert(i + 1, copy.deepcopy(block[i])))


def drop_update(source: str) -> list[str]:
    """Every `scaler.update()` gone (a path's last step then has none after it)."""
    tree = ast.parse(source)
    found = _found(tree, _statement(lambda s: _method(s, "update")))
    for block, index in reversed(found):
        _delete(block, index)
    return [ast.unparse(tree)] if found else []


def plain_step(source: str) -> list[str]:
    def edit(block: Block, index: int) -> None:
        call = _call(block[index])
        assert call is not None and call.args
        block[index] = ast.Expr(ast.Call(ast.Attribute(call.args[0], "step", ast.Load()), [], []))
    return _each_site(source, _statement(lambda s: _method(s, "step")), edit)


def unscaled_backward(source: str) -> list[str]:
    return _each_site(source, _statement(_scaled_backward),
                      lambda block, i: _unscale_calls(block[i]))


def backward_in_autocast(source: str) -> list[str]:
    """A scaled backward that follows its `with autocast():` moved to the end of its body."""
    def chosen(block: Block, index: int) -> bool:
        before = block[index - 1] if index else None
        return (_scaled_backward(block[index]) and isinstance(before, ast.With)
                and "autocast" in ast.unparse(before.items[0].context_expr))

    def edit(block: Block, index: int) -> None:
        region = block[index - 1]
        assert isinstance(region, ast.With)
        region.body.append(block.pop(index))
    return _each_site(source, chosen, edit)


def scaler_none(source: str) -> list[str]:
    """`scaler = None` on a path, right after the scaler is created."""
    def creates(statement: ast.stmt) -> bool:
        return (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                and isinstance(statement.value, ast.Call)
                and ast.unparse(statement.value.func).endswith("GradScaler"))

    def edit(block: Block, index: int) -> None:
        created = block[index]
        assert isinstance(created, ast.Assign)
        none = ast.Assign([copy.deepcopy(created.targets[0])], ast.Constant(None))
        block.insert(index + 1, ast.If(ast.UnaryOp(ast.Not(), ast.Name("DATA", ast.Load())),
                                       [none], []))
    return _each_site(source, _statement(creates), edit)


MUTATIONS: dict[str, Mutation] = {
    "drop unscale_": Mutation(frozenset({"AMP706"}), drop_unscale),
    "unscale_ twice": Mutation(frozenset({"AMP705"}), unscale_twice),
    "drop update()": Mutation(frozenset({"AMP703", "AMP704"}), drop_update),
    "plain step()": Mutation(frozenset({"AMP708"}), plain_step),
    "unscaled backward into a scaled step": Mutation(frozenset({"AMP702"}), unscaled_backward),
    "backward inside autocast": Mutation(frozenset({"AMP707"}), backward_in_autocast),
    "scaler None on a path": Mutation(frozenset({"AMP701"}), scaler_none),
}
