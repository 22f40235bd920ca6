"""Where the grad scaler lives: one scaler, created once, reachable from every site using it.

The rule, narrowest scope first:
1. every use is in methods of one class that has `__init__`: `self.scaler`, created in
   `__init__` right after the optimizer is assigned (or at its end);
2. every use is in one function (or all at module level) that also builds the optimizer:
   a local, created right after the statement that builds the optimizer;
3. otherwise: a module global, created after the imports (one per process, so DDP/spawn
   workers each get their own).
"""

from __future__ import annotations

import builtins
import re
from dataclasses import dataclass
from typing import Protocol

import libcst as cst

from amprewrite.analysis.facts import Block, ModuleFacts, Statement
from amprewrite.analysis.names import iter_keys

SCALER_NAMES = ("scaler", "grad_scaler", "amp_scaler")
# Every name the rewrite may give the scaler: one of SCALER_NAMES, or the first with the
# suffix FreshNames adds when all are taken (`scaler_2`).
SCALER_NAME = re.compile("|".join([*SCALER_NAMES, rf"{SCALER_NAMES[0]}_\d+"]))


@dataclass(frozen=True)
class ScalerHome:
    """Where the one grad scaler is created and how the training step refers to it."""

    expression: str  # how every site refers to it: `scaler` or `self.scaler`
    block: Block  # the block it is created in
    index: int  # created before the statement at this index of `block`
    scope: str  # "attribute", "local" or "global" (for the finding's message)


class Use(Protocol):
    """A place that refers to the scaler: a call site, or an assignment it follows."""

    @property
    def function(self) -> cst.FunctionDef | None: ...

    @property
    def statement(self) -> Statement: ...


def find_scaler_home(
    facts: ModuleFacts, uses: list[Use], optimizer_keys: set[str | None], global_index: int,
    name: str,
) -> ScalerHome:
    """Where the one scaler, called `name`, lives."""
    functions = {site.function for site in uses}
    classes = {facts.function_class.get(f) for f in functions if f is not None}
    if None not in functions and len(classes) == 1 and None not in classes:
        home = attribute_home(facts, classes.pop(), optimizer_keys, name)  # type: ignore[arg-type]
        if home is not None:
            return home
    if len(functions) == 1:
        home = _local_home(facts, next(iter(functions)), optimizer_keys, uses, name)
        if home is not None:
            return home
    return ScalerHome(name, facts.module, global_index, "global")


def bound_before(arguments: tuple[str, ...], index: int, facts: ModuleFacts) -> bool:
    """Every name the scaler's arguments read (`args` in `GradScaler(args.opt_level)`) exists
    at module level before the statement at `index`: imported, or assigned by a top-level
    statement above it."""
    bound = set(facts.imports.aliases) | set(dir(builtins))
    for statement in facts.module.body[:index]:
        bound |= {key for b in facts.bindings if b.statement is statement for key in b.keys}
        if isinstance(statement, cst.FunctionDef | cst.ClassDef):
            bound.add(statement.name.value)
    read = {key.split(".", 1)[0] for argument in arguments
            for key in iter_keys(cst.parse_expression(argument.split("=", 1)[-1]
                                                      if keyword_argument(argument)
                                                      else argument))}
    return read <= bound


_KEYWORD = re.compile(r"[A-Za-z_]\w*=(?!=)")


def keyword_argument(argument: str) -> bool:
    """`keep_batchnorm_fp32=k`, not `args.level` nor `a == b`: a scaler argument's text."""
    return _KEYWORD.match(argument) is not None


def attribute_home(
    facts: ModuleFacts, cls: cst.ClassDef, optimizer_keys: set[str | None], name: str
) -> ScalerHome | None:
    """`self.<name>` in `cls.__init__`, right after the optimizer is assigned (or at its
    end); None without an `__init__`."""
    init = facts.init_of(cls)
    if init is None or not isinstance(init.body, cst.IndentedBlock):
        return None
    anchor = _last_binding_anchor(facts, init, optimizer_keys)
    index = anchor + 1 if anchor is not None else len(init.body.body)
    return ScalerHome(f"self.{name}", init.body, index, "attribute")


def _local_home(
    facts: ModuleFacts,
    function: cst.FunctionDef | None,
    optimizer_keys: set[str | None],
    uses: list[Use],
    name: str,
) -> ScalerHome | None:
    anchor = _last_binding_anchor(facts, function, optimizer_keys)
    if anchor is None:
        return None
    builds = {id(b.statement) for b in facts.bindings if set(b.keys) & optimizer_keys}
    first_use = min(_top_index(facts, function, site.statement) for site in uses
                    if id(site.statement) not in builds)
    if anchor >= first_use:
        return None
    block = facts.module if function is None else function.body
    if not isinstance(block, cst.Module | cst.IndentedBlock):
        return None
    return ScalerHome(name, block, anchor + 1, "local")


def _last_binding_anchor(
    facts: ModuleFacts, function: cst.FunctionDef | None, keys: set[str | None]
) -> int | None:
    """Index in `function`'s body of the top statement that last binds one of `keys`."""
    indexes = [
        _top_index(facts, function, binding.statement)
        for binding in facts.bindings
        if binding.function is function and set(binding.keys) & keys
    ]
    return max(indexes) if indexes else None


def _top_index(facts: ModuleFacts, function: cst.FunctionDef | None, statement: Statement) -> int:
    """Index of the statement of `function`'s own body (or the module's) containing `statement`."""
    for outer in facts.enclosing_statements(statement):
        info = facts.statements.get(outer)
        if info is not None and info.parent is function:
            return info.index
    raise ValueError("statement is not inside the function")
