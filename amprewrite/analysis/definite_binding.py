"""Whether a name is assigned on every path that reaches a statement (definite assignment).

`if args.sgd: opt = SGD(...) else: opt = Adam(...)` binds `opt` on every path; a lone
`if args.use_optimizer: opt = SGD(...)` does not, and neither does a loop body (it may run
zero times). A branch that leaves (`return`, `raise`, `continue`, `break`) never reaches the
statement, so it counts as binding.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts, Statement, body
from amprewrite.analysis.names import bound_keys, iter_keys, target_keys, walk


def bound_on_every_path(key: str, statement: Statement, facts: ModuleFacts) -> bool:
    """True when every path from the start of `statement`'s function (or module) to it has
    assigned `key`."""
    current = statement
    while True:
        block, index = facts.position(current)
        if any(_binds(earlier, key) for earlier in block.body[:index]):
            return True
        parent = facts.statements[current].parent
        if parent is None or isinstance(parent, cst.FunctionDef | cst.ClassDef):
            return False
        current = parent


def may_be_unbound(key: str, statement: Statement, facts: ModuleFacts) -> bool:
    """`key` may not exist where `statement` runs: it is assigned in the statement's function
    but not on every path (`if args.amp: scaler = GradScaler()`), or only in other scopes
    (the module, `__init__`) and there only on some paths. A parameter, or a key bound where
    this file cannot see, counts as bound."""
    function = facts.statements[statement].function
    scopes = {b.function for b in facts.bindings if key in b.keys}
    if function in scopes:
        return not bound_on_every_path(key, statement, facts)
    if not scopes or (function is not None
                      and key in {n for names in facts.parameters(function) for n in names}):
        return False
    return not any(bound_in_scope(key, scope, facts) for scope in scopes)


def bound_under_same_test(
    key: str, statement: Statement, guards: Sequence[cst.If], facts: ModuleFacts
) -> bool:
    """`if args.autotune: a_optimizer = Adam(...)`, and later `if args.autotune:
    a_optimizer.step()` (cleanrl's SAC): `statement` runs under one of `guards` (the `if`s
    around it) whose test is that of an earlier `if` binding `key` on every path through its
    body, a test of names and attributes that nothing rebinds after that `if`. Wherever the
    statement runs, the key exists."""
    for guard in guards:
        if not _stable(guard.test):
            continue
        test, keys = facts.one_line(guard.test), set(iter_keys(guard.test))
        for binder in _ifs_run_before(guard, keys, facts):
            if (facts.one_line(binder.test) == test and _suite_binds(binder.body, key)
                    and not _rebound_after(binder, keys, facts)):
                return True
    return False


_UNSTABLE = (cst.Call, cst.Subscript, cst.NamedExpr, cst.Await, cst.Yield, cst.Lambda)


def _stable(test: cst.BaseExpression) -> bool:
    """A test whose value changes only when a name or attribute in it is rebound: no call, no
    subscript (`random() < 0.5`, `flags["amp"]`)."""
    return not any(isinstance(node, _UNSTABLE) for node in walk(test))


def _ifs_run_before(guard: cst.If, keys: set[str], facts: ModuleFacts) -> list[cst.If]:
    """The `if` statements every path to `guard` passes first: those before it in the blocks
    around it; for a guard inside a function (not a nested one, whose test may read its outer
    function's names), also the module's top-level ones when the function binds none of the
    test's names (the test reads the module's globals)."""
    found: list[cst.If] = []
    current: Statement = guard
    while True:
        block, index = facts.position(current)
        found += [s for s in body(block)[:index] if isinstance(s, cst.If)]
        parent = facts.statements[current].parent
        if parent is None:
            return found
        if isinstance(parent, cst.FunctionDef | cst.ClassDef):
            break
        current = parent
    function = facts.statements[guard].function
    nested = function is not None and any(
        isinstance(outer, cst.FunctionDef) for outer in facts.enclosing_statements(function)[1:])
    if function is not None and not nested and not _binds_any(function, keys, facts):
        found += [s for s in body(facts.module) if isinstance(s, cst.If)]
    return found


def _binds_any(function: cst.FunctionDef, keys: set[str], facts: ModuleFacts) -> bool:
    positional, keyword_only = facts.parameters(function)
    return bool(keys & {*positional, *keyword_only}) or bool(keys & bound_keys(function.body))


def _rebound_after(binder: cst.If, keys: set[str], facts: ModuleFacts) -> bool:
    """Whether a statement after `binder` in the source binds any of `keys`."""
    start = facts.order[binder]
    return any(position > start and keys & _header_binds(statement)
               for statement, position in facts.order.items())


def _header_binds(statement: Statement) -> set[str]:
    """What a simple statement line binds, or the header of a `for` or `with` (their bodies'
    lines are statements of their own)."""
    if isinstance(statement, cst.SimpleStatementLine):
        return bound_keys(statement)
    if isinstance(statement, cst.For):
        return set(target_keys(statement.target))
    if isinstance(statement, cst.With):
        return {key for item in statement.items if item.asname is not None
                for key in target_keys(item.asname.name)}
    return set()


def bound_in_scope(key: str, function: cst.FunctionDef | None, facts: ModuleFacts) -> bool:
    """True when running `function` (or the module) to its end assigns `key` on every path."""
    body = facts.module.body if function is None else function.body.body
    return any(_binds(statement, key) for statement in body)


def _binds(statement: cst.CSTNode, key: str) -> bool:
    """`statement`, run to its end, has assigned `key` on every path through it."""
    if isinstance(statement, cst.SimpleStatementLine):
        return any(key in _assigned(small) for small in statement.body)
    if isinstance(statement, cst.If) and _is_main_guard(statement.test):
        return _suite_binds(statement.body, key)  # the script's own run: always taken
    if isinstance(statement, cst.If):
        if statement.orelse is None:
            return False
        orelse = statement.orelse
        other = _binds(orelse, key) if isinstance(orelse, cst.If) else _suite_binds(
            orelse.body, key)
        return other and _suite_binds(statement.body, key)
    if isinstance(statement, cst.With):
        return _suite_binds(statement.body, key)
    if isinstance(statement, cst.Try):
        if statement.finalbody is not None and _suite_binds(statement.finalbody.body, key):
            return True
        main = _suite_binds(statement.body, key) or (
            statement.orelse is not None and _suite_binds(statement.orelse.body, key))
        return main and all(_suite_binds(h.body, key) for h in statement.handlers)
    return False  # loops may run zero times; definitions bind other names


def _is_main_guard(test: cst.BaseExpression) -> bool:
    """`__name__ == "__main__"` (either way round)."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.Equal)):
        return False
    sides = {type(test.left), type(test.comparisons[0].comparator)}
    names = [n.value for n in (test.left, test.comparisons[0].comparator)
             if isinstance(n, cst.Name)]
    return sides == {cst.Name, cst.SimpleString} and names == ["__name__"]


def _suite_binds(suite: cst.BaseSuite, key: str) -> bool:
    if isinstance(suite, cst.SimpleStatementSuite):
        return _leaves(suite.body) or any(key in _assigned(small) for small in suite.body)
    return any(_binds(s, key) or _leaves_line(s) for s in suite.body)


def _leaves_line(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and _leaves(statement.body)


def _leaves(smalls: Sequence[cst.BaseSmallStatement]) -> bool:
    return bool(smalls) and isinstance(smalls[-1], cst.Return | cst.Raise | cst.Continue
                                       | cst.Break)


def _assigned(small: cst.BaseSmallStatement) -> set[str]:
    if isinstance(small, cst.Assign):
        return {k for target in small.targets for k in target_keys(target.target)}
    if isinstance(small, cst.AnnAssign | cst.AugAssign) and (
            not isinstance(small, cst.AnnAssign) or small.value is not None):
        return set(target_keys(small.target))
    return set()
