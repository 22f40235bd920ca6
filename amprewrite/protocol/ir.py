"""The checker's program: each function's body reduced to the events the AMP protocol is
about, inside the control flow that orders them. Everything else is dropped."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

# Scaler values a key can hold on one path.
NONE, UNBOUND, ENABLED, DISABLED, UNKNOWN = "none", "unbound", "enabled", "disabled", "unknown"


@dataclass(frozen=True)
class Cond:
    """A condition the checker can correlate across a program: its text, and the names
    whose assignment makes what a path knew of it stale."""

    text: str
    names: frozenset[str]


# --- values assigned to scaler keys ---

@dataclass(frozen=True)
class NewScaler:
    """`GradScaler(...)`: enabled, disabled (`enabled=False`) or as `flag` says."""

    enabled: bool | None = True  # None: as `flag`
    flag: Cond | None = None
    negated: bool = False  # `enabled=not flag`


@dataclass(frozen=True)
class Choice:
    """`a if test else b`."""

    test: Test
    then: Value
    otherwise: Value


@dataclass(frozen=True)
class Copy:
    key: str


Value = NewScaler | Choice | Copy | str  # str: NONE or UNKNOWN


# --- tests ---

@dataclass(frozen=True)
class ScalerTest:
    """`key is None` (`none=True`), `key is not None` / truthiness (`none=False`),
    `key.is_enabled()` (`enabled=True`)."""

    key: str
    none: bool | None
    enabled: bool | None = None


@dataclass(frozen=True)
class FlagTest:
    cond: Cond
    value: bool


@dataclass(frozen=True)
class Impossible:
    """A test that never fails (`__name__ == "__main__"`: a script runs as the main module)."""


Atom = ScalerTest | FlagTest | Impossible


@dataclass(frozen=True)
class Test:
    """What a path knows when a test held (`when_true`, all of them) or failed."""

    when_true: tuple[Atom, ...] = ()
    when_false: tuple[Atom, ...] = ()

    def negated(self) -> Test:
        return Test(self.when_false, self.when_true)


# --- events ---

@dataclass(frozen=True)
class Assign:
    key: str
    value: Value


@dataclass(frozen=True)
class Forget:
    """Names assigned here: what paths knew of conditions on them no longer holds."""

    names: frozenset[str]


@dataclass(frozen=True)
class Build:
    """An optimizer built over the parameters of `owners` (None: not known)."""

    optimizer: str
    owners: frozenset[str] | None


@dataclass(frozen=True)
class ScalerCall:
    scaler: str
    method: str
    optimizer: str | None
    node: ast.AST


@dataclass(frozen=True)
class Backward:
    scaler: str | None  # the scaler whose `scale()` made the tensor; None: unscaled
    node: ast.AST
    reach: frozenset[str] | None = None  # what the loss was computed by (None: not known)


@dataclass(frozen=True)
class Step:
    optimizer: str
    node: ast.AST


@dataclass(frozen=True)
class Zero:
    optimizer: str | None  # None: every gradient (a model's zero_grad, `p.grad = None`)
    node: ast.AST


@dataclass(frozen=True)
class GradUse:
    """Code that reads or changes gradients: of the models or optimizers `targets` names
    (`model`, `opt:optimizer`), or of any (None)."""

    targets: frozenset[str] | None
    node: ast.AST


@dataclass(frozen=True)
class Probe:
    """A site whose scalers' values a reader of the program asks for (a checkpoint's save or
    restore): no effect."""

    node: ast.AST


@dataclass(frozen=True)
class Call:
    """A call of a function of this module, its parameters bound to the arguments' keys."""

    function: str  # qualified name
    bindings: tuple[tuple[str, str | None], ...]
    node: ast.AST


# --- control flow ---

@dataclass(frozen=True)
class If:
    test: Test
    body: Block
    orelse: Block


@dataclass(frozen=True)
class Loop:
    body: Block
    orelse: Block
    endless: bool  # `while True:`: leaves only by break, return or raise
    each: bool = False  # over a collection of optimizers: runs at least once


@dataclass(frozen=True)
class Try:
    body: Block
    handlers: tuple[Block, ...]
    orelse: Block
    final: Block


@dataclass(frozen=True)
class Autocast:
    body: Block


@dataclass(frozen=True)
class Jump:
    kind: str  # "return", "break", "continue", "raise"


Node = (Assign | Forget | Build | ScalerCall | Backward | Step | Zero | GradUse | Probe | Call | If
        | Loop | Try | Autocast | Jump)
Block = tuple[Node, ...]


@dataclass
class Function:
    """A function of the module as the checker reads it."""

    qualname: str
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Module
    cls: str | None  # the class whose method it is
    params: tuple[str, ...]
    maybe_none: frozenset[str]  # parameters defaulting to None or tested against None
    local_names: frozenset[str]  # names local to it (parameters included)
    parent: str | None  # the function it is nested in
    body: Block = ()
    calls: set[str] = field(default_factory=set)  # functions of the module it calls
