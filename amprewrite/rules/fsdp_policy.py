"""FSDP wraps get the sharding API's own mixed-precision policy.

`fully_shard(model)` gains `mp_policy=MixedPrecisionPolicy(param_dtype=..., reduce_dtype=
torch.float32)`, `FullyShardedDataParallel(model)` gains `mixed_precision=MixedPrecision(...)`
likewise: parameters are all-gathered and computed in the low-precision dtype (half the
all-gather traffic and memory), gradients reduced in float32. The dtype is autocast's, and
autocast stays around the forward pass and loss: it keeps the operations that need float32
(softmax, norms, losses) in float32, as Accelerate and Lightning do on FSDP. Float16 keeps
its sharded grad scaler.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis.names import dotted
from amprewrite.analysis.sharding import ShardingWrap
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, SKIP, declare
from amprewrite.options import Options
from amprewrite.rules.context import RuleContext
from amprewrite.rules.edits import append_in_layout, keyword
from amprewrite.rules.registry import Example, rule
from amprewrite.rules.shared_examples import MIXED_PRECISION_ALREADY
from amprewrite.transform import Insert, Replace

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis

FSDP_POLICY_ADDED = declare(
    "AMP114", CHANGE, "FSDP mixed-precision policy added",
    "An FSDP wrap (`fully_shard`, `FullyShardedDataParallel`) gets its mixed-precision policy: "
    "parameters all-gathered and computed in the low-precision dtype, gradients reduced in "
    "float32. Autocast stays around the forward pass and loss for the operations that need "
    "float32.",
    why="The file trains a model wrapped by `fully_shard` or `FullyShardedDataParallel` at O1.",
)

FSDP_POLICY_SET = declare(
    "AMP225", SKIP, "FSDP wrap already chooses its mixed precision",
    "The wrap already passes a policy (`mp_policy`, `mixed_precision`) or a `**mapping` that may "
    "hold one: left as is. Autocast and the grad scaler are added as for any training step.",
    why="The FSDP wrap already passes `mp_policy`/`mixed_precision`, or a `**mapping`.",
    example="fully_shard(model, mp_policy=policy)   # left as is",
)


def add_policies(ctx: RuleContext, wraps: list[ShardingWrap]) -> None:
    """Each wrap without a policy gets one, bound once per function (or module) before the
    first statement holding such a wrap."""
    torch = ctx.torch()
    imported: dict[str, str] = {}
    bound: dict[tuple[cst.FunctionDef | None, str], str] = {}
    for wrap in wraps:
        if wrap.current is not None:
            given = ctx.facts.one_line(wrap.current).rstrip(", ")
            ctx.notes.append(Note(FSDP_POLICY_SET, wrap.call,
                                  f"`{wrap.api}` is given `{given}`; its mixed precision is "
                                  "left as it is"))
            continue
        scope = (wrap.site.function, wrap.policy_class)
        if scope not in bound:
            policy = imported.get(wrap.policy_class) or _import_policy(ctx, wrap.policy_class)
            imported[wrap.policy_class] = policy
            bound[scope] = _bind_policy(ctx, wrap, policy, torch)
        argument = keyword(wrap.keyword, cst.Name(bound[scope]))
        ctx.plan.replaces.append(Replace(wrap.call, append_in_layout(
            wrap.call, [argument], ctx.facts, ctx.line_limit)))
        ctx.notes.append(Note(FSDP_POLICY_ADDED, wrap.call,
                              f"`{wrap.api}` gets `{wrap.keyword}={bound[scope]}`: parameters "
                              "gathered in low precision, gradients reduced in float32"))


def _bind_policy(ctx: RuleContext, wrap: ShardingWrap, policy: str, torch: str) -> str:
    """`mp_policy = MixedPrecisionPolicy(...)` before the outermost statement of the wrap's
    function (or module) that holds it; the name bound."""
    assert ctx.style is not None
    name = ctx.names.fresh(("mp_policy", "fsdp_mp_policy"))
    chain = ctx.facts.enclosing_statements(wrap.site.statement)
    top = next((chain[i] for i in range(len(chain) - 1)
                if isinstance(chain[i + 1], cst.FunctionDef | cst.ClassDef)), chain[-1])
    block, index = ctx.facts.position(top)
    arguments = f"param_dtype={ctx.style.param_dtype}, reduce_dtype={torch}.float32"
    code = f"{name} = {policy}({arguments})"  # wrapped past the line limit: line_fitting
    ctx.plan.inserts.append(Insert(block, index, [ctx.parse_statement(code)]))
    return name


def _import_policy(ctx: RuleContext, qualified: str) -> str:
    """The local name of the policy class: added to the module's `from torch.distributed.fsdp
    import ...` when it has one, else imported on a line of its own."""
    assert ctx.style is not None
    module, _, name = qualified.rpartition(".")
    local = ctx.names.fresh((name, f"Fsdp{name}"))
    existing = _from_import(ctx, module)
    if existing is not None and local == name:
        ctx.plan.replaces.append(Replace(existing, _with_name(name)))
    else:
        alias = "" if local == name else f" as {local}"
        ctx.style.imports.append(f"from {module} import {name}{alias}")
    return local


def _from_import(ctx: RuleContext, module: str) -> cst.ImportFrom | None:
    """The module's top-level `from <module> import a, b` (names listed, on one line)."""
    for statement in ctx.facts.module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if (isinstance(small, cst.ImportFrom) and small.module is not None
                    and not small.relative and dotted(small.module) == module
                    and isinstance(small.names, Sequence) and small.lpar is None):
                return small
    return None


def _with_name(name: str) -> Callable[[cst.CSTNode], cst.CSTNode]:
    """A builder adding `name` to a from-import where isort puts it (classes before
    functions, each alphabetically)."""

    def build(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.ImportFrom) and isinstance(node.names, Sequence)
        names = list(node.names)
        comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        position = next((i for i, alias in enumerate(names)
                         if _isort_key(str(alias.evaluated_name)) > _isort_key(name)),
                        len(names))
        new = cst.ImportAlias(cst.Name(name))
        if position == len(names):
            names[-1] = names[-1].with_changes(comma=comma)
        else:
            new = new.with_changes(comma=comma)
        names.insert(position, new)
        return node.with_changes(names=names)

    return build


def _isort_key(name: str) -> tuple[int, str]:
    """isort's default order within a from-import: constants, classes, then the rest."""
    kind = 0 if name.isupper() else 1 if name[:1].isupper() else 2
    return kind, name


def wants_policies(analysis: ModuleAnalysis, options: Options) -> bool:
    """O1 (O2/O3 cast the model themselves) on a module that trains and wraps with FSDP."""
    return options.opt_level == "O1" and analysis.training.found and bool(
        analysis.sharding_wraps)


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    if wants_policies(analysis, ctx.options):
        add_policies(ctx, analysis.sharding_wraps)


_FSDP_POLICY_EXAMPLES = (
    Example(
        before="""\
import torch
from torch.distributed.fsdp import fully_shard

model = Transformer()
for layer in model.layers:
    fully_shard(layer)
fully_shard(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
""",
        after="""\
import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

amp_device = "cuda" if torch.cuda.is_available() else "cpu"

model = Transformer()
mp_policy = MixedPrecisionPolicy(
    param_dtype=torch.bfloat16, reduce_dtype=torch.float32
)
for layer in model.layers:
    fully_shard(layer, mp_policy=mp_policy)
fully_shard(model, mp_policy=mp_policy)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast(amp_device, dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
""",
        codes=(FSDP_POLICY_ADDED,), options=Options(dtype="bfloat16", plain=True),
    ),
    Example(
        before=MIXED_PRECISION_ALREADY,
        after=None,
        codes=(),
    ),
    Example(
        before="""\
import torch
from torch.distributed.fsdp import fully_shard

model = build()
fully_shard(model, mp_policy=policy)
optimizer = torch.optim.AdamW(model.parameters())
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
""",
        after="""\
import torch
from amprewrite_runtime import GradScaler, autocast
from torch.distributed.fsdp import fully_shard

model = build()
fully_shard(model, mp_policy=policy)
optimizer = torch.optim.AdamW(model.parameters())
scaler = GradScaler(sharded=True)
for x, y in loader:
    optimizer.zero_grad()
    with autocast():
        loss = torch.nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        codes=(FSDP_POLICY_SET,),
    ),
)

RULE = rule("fsdp-policy", (FSDP_POLICY_ADDED, FSDP_POLICY_SET), _plan,
            examples=_FSDP_POLICY_EXAMPLES)
