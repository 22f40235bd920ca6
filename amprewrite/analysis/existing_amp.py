"""Detect mixed precision that a module already uses (so the rewrite leaves it alone).

Using an AMP API is not training with AMP: a script whose only autocast covers evaluation
(grad-free code) still trains in FP32, and one that imports apex for SyncBatchNorm or its fused
optimizers (or imports `apex.amp` and never calls it) is an FP32 script. Such files are
rewritten; the author's evaluation autocast is kept as written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis.amp_flags import Gate, common_gates, gates_of, option_of
from amprewrite.analysis.autocast_values import (
    AutocastEntry,
    AutocastValues,
    mentions_autocast,
)
from amprewrite.analysis.evaluation import statement_under_no_grad
from amprewrite.analysis.facts import ModuleFacts, body
from amprewrite.analysis.names import dotted, walk
from amprewrite.analysis.statements import is_backward_call, is_step_call
from amprewrite.analysis.training_step import Note, Region
from amprewrite.catalog import SKIP, declare

EVALUATION_ONLY_AUTOCAST = declare(
    "AMP144", SKIP, "autocast that covers evaluation only, kept",
    "The file trained in FP32 (its only autocast runs without gradients: under "
    "`no_grad`/`inference_mode`, or in an evaluation function the training step never calls): "
    "the training step is rewritten (with the author's dtype when every such autocast names the "
    "same one) and this region is kept as written, not wrapped twice.",
    why=(
        "The file's only autocast runs without gradients (evaluation), so the training "
        "step is rewritten and that region kept."
    ),
    example=(
        "with torch.no_grad(), torch.autocast(\"cuda\"):\n"
        "    val_out = model(xv)   # kept; the training step gets its own region"
    ),
)

OPTIONAL_APEX_KEPT = declare(
    "AMP612", SKIP, "optional apex path behind the script's flag, kept",
    "The script's only mixed precision is apex's, behind one of its flags, and apex's "
    "`FP16_Optimizer` / `fp16_utils` have no native migration: that path is kept as written, "
    "the default FP32 training step is rewritten, and the grad scaler is off (O0) wherever "
    "the flag is set, so the apex path trains as before. Remove the apex path when the "
    "rewrite's mixed precision serves.",
    why=(
        "apex's FP16 utilities (`FP16_Optimizer`, `network_to_half`) run only behind one flag "
        "(`if args.fp16:`), and the default path trains in FP32."
    ),
    example=(
        "if args.fp16:\n"
        "    optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)   # kept\n"
        "scaler = GradScaler(\"O0\" if args.fp16 else \"O1\")"
    ),
)

_AMP_MODULES = (
    "torch.amp",
    "torch.cuda.amp",
    "torch.cpu.amp",
    "apex.amp",
    "apex.fp16_utils",
    "amprewrite_runtime",
)
# apex's FP16 training outside apex.amp: FP16_Optimizer (also under apex.optimizers),
# network_to_half and the other fp16_utils
_APEX_FP16 = ("apex.fp16_utils.", "apex.optimizers.FP16_Optimizer", "apex.contrib.optimizers.")
_AMP_NAMES = frozenset({"torch.autocast", "torch.GradScaler", "apex.amp",
                        "apex.optimizers.FP16_Optimizer"})
_EVALUATION_WORDS = ("eval", "valid", "test", "predict", "infer", "generate", "sample")


def _is_amp(qualified: str) -> bool:
    return qualified in _AMP_NAMES or any(
        qualified == module or qualified.startswith(module + ".") for module in _AMP_MODULES
    )


def _is_scaler_class(qualified: str) -> bool:
    """A grad scaler class from anywhere (FSDP's `ShardedGradScaler`, or one a project
    re-exports: `from .fsdp import ShardedGradScaler`), known by the name every grad scaler
    class ends in."""
    return qualified.rsplit(".", 1)[-1].endswith("GradScaler")


def existing_amp(facts: ModuleFacts) -> str | None:
    """The first AMP API the module uses (`torch.autocast`, `torch.cuda.amp`, ...), or None:
    an import of one, a call of one, or a decorator naming one (from the collected facts, so
    no further pass over the tree)."""
    for target in facts.imports.aliases.values():
        if _is_amp(target):
            return target
    expressions: list[cst.BaseExpression] = [site.call.func for site in facts.calls]
    expressions.extend(d.decorator for f in facts.functions for d in f.decorators)
    if mentions_autocast(facts):  # `partial(torch.autocast, ...)`, `ac = torch.autocast`
        expressions.extend(arg.value for site in facts.calls for arg in site.call.args)
        expressions.extend(binding.value for binding in facts.bindings)
    for expression in expressions:
        resolved = facts.imports.resolve(expression)
        if resolved is not None and _is_amp(resolved):
            return resolved
    # a grad scaler class imported from elsewhere (FSDP's, or a project's own re-export)
    # and built here
    for site in facts.calls:
        resolved = facts.imports.resolve_in_project(site.call.func)
        if resolved is not None and _is_scaler_class(resolved):
            return resolved
    return None


@dataclass(frozen=True)
class OptionalApex:
    """apex's FP16 path, taken where `test` holds (`args.fp16`, `not args.fp32`)."""

    test: str
    taken: str  # "with `--fp16` (`args.fp16`)", "without `--fp32` (`args.fp32`)"
    node: cst.CSTNode  # where the flag first gates it


@dataclass
class AmpInTraining:
    """Whether training already runs mixed precision, and the autocasts that cover
    evaluation only (kept as written when the training step is rewritten)."""

    trains: bool = False  # a grad scaler, an apex.amp call, or a training autocast
    evaluation_autocasts: list[AutocastEntry] = field(default_factory=list)
    dtype: str | None = None  # the low-precision dtype they all name, if they agree on one
    # apex's FP16 path behind a flag (`if args.fp16:`), the file's only AMP in training
    optional_apex: OptionalApex | None = None

    def covers(self, region: Region, facts: ModuleFacts) -> bool:
        """The region already runs under one of the evaluation autocasts."""
        owners = {id(entry.statement) for entry in self.evaluation_autocasts}
        return any(id(outer) in owners for outer in
                   facts.enclosing_statements(body(region.block)[region.start])[1:])

    @property
    def notes(self) -> list[Note]:
        notes = [Note(EVALUATION_ONLY_AUTOCAST, entry.node,
                      "this autocast covers evaluation only: the training "
                      "step ran in FP32 and is rewritten; this region is kept as written")
                 for entry in self.evaluation_autocasts]
        if self.optional_apex is not None:
            notes.append(Note(OPTIONAL_APEX_KEPT, self.optional_apex.node, (
                f"apex's FP16 path, taken {self.optional_apex.taken}, is kept as written: the "
                "default FP32 training step is rewritten, and the grad scaler is off (O0) on "
                "the apex path")))
        return notes


def amp_in_training(facts: ModuleFacts, training_regions: list[Region],
                    autocasts: AutocastValues) -> AmpInTraining:
    found = AmpInTraining()
    in_training = {id(s) for region in training_regions for s in region.statements}
    apex: list[dict[Gate, cst.CSTNode]] = []
    for site in facts.calls:
        resolved = facts.imports.resolve(site.call.func) or ""
        scaler = resolved.rsplit(".", 1)[-1] in ("GradScaler", "ShardedGradScaler") and (
            resolved.startswith(("torch.", "amprewrite_runtime.")))
        if resolved.startswith(_APEX_FP16):
            apex.append(gates_of(site.call, site.statement, facts))
        elif scaler or resolved.startswith("apex.amp."):
            found.trains = True
    shared = common_gates(apex) if apex else {}
    if shared:
        (key, when_true), node = min(shared.items(), key=lambda item: facts.order.get(
            facts.statements_around(item[1])[0], 0))
        option = option_of(key, facts)
        named = f"`{option}` (`{key}`)" if option else f"`{key}`"
        found.optional_apex = OptionalApex(key if when_true else f"not {key}",
                                           f"{'with' if when_true else 'without'} {named}", node)
    elif apex:
        found.trains = True
    if autocasts.unfollowed:  # `ctx.__enter__()`, a helper never entered here: not followed
        found.trains = True
    dtypes = set()
    for entry in autocasts.entries:
        if _grad_free(entry, facts, in_training):
            found.evaluation_autocasts.append(entry)
            dtypes.add(entry.dtype)
        else:
            found.trains = True
    found.dtype = dtypes.pop() if len(dtypes) == 1 else None
    return found


def _grad_free(entry: AutocastEntry, facts: ModuleFacts, in_training: set[int]) -> bool:
    """The autocast is entered (a `with` item, a decorator) where code runs without
    gradients: under no_grad / inference_mode, or in an evaluation function the training
    step never calls."""
    if statement_under_no_grad(entry.statement, facts):
        return True
    function = facts.statements[entry.statement].function if isinstance(
        entry.statement, cst.With) else entry.statement
    return function is not None and _evaluation_function(function, facts, in_training)


def _evaluation_function(function: cst.FunctionDef, facts: ModuleFacts,
                         in_training: set[int]) -> bool:
    name = function.name.value.lower()
    calls = [node for node in walk(function.body) if isinstance(node, cst.Call)]
    if any(is_backward_call(c) or is_step_call(c) for c in calls):
        return False
    evaluates = any(word in name for word in _EVALUATION_WORDS) or any(
        isinstance(c.func, cst.Attribute) and c.func.attr.value == "eval" and not c.args
        for c in calls)
    called_in_training = any(
        (dotted(s.call.func) or "").removeprefix("self.") == function.name.value
        and any(id(outer) in in_training for outer in facts.enclosing_statements(s.statement))
        for s in facts.calls)
    return evaluates and not called_in_training
