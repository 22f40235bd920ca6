"""Code that mixed precision makes risky and that the rewrite reports without changing it."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amprewrite.analysis.dtype.ops import LOW_DTYPES, LOW_TENSOR_TYPES
from amprewrite.analysis.dtype.views import low_cast_method
from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import SKIP, declare

MANUAL_CAST = declare(
    "AMP140", SKIP, "manual cast to a low-precision dtype",
    "apex's rule holds: never cast the model or inputs by hand under AMP; remove the cast and "
    "let autocast pick the precision per operation.",
    why=(
        "The script casts its model or inputs to float16/bfloat16 by hand "
        "(`model.half()`, `x.to(torch.float16)`)."
    ),
    example=(
        "model = model.half()\n"
        "x = x.to(torch.float16)"
    ),
)

AUTOGRAD_GRAD = declare(
    "AMP208", SKIP, "`torch.autograd.grad` in a training step",
    "Left unscaled: results stay correct, but float16 gradients may underflow. Scale the outputs "
    "and unscale the gradients as in the AMP recipe.",
    why="The training step computes gradients with `torch.autograd.grad`.",
    example="grads = torch.autograd.grad(loss, model.parameters())",
)

_LOW_PRECISION = {**LOW_DTYPES, **LOW_TENSOR_TYPES}


@dataclass(frozen=True)
class ManualCast:
    """`.half()`, `.bfloat16()`, `.to(torch.float16)`: a cast by hand to `dtype`."""

    call: cst.Call
    text: str  # the call on one line
    dtype: str  # "float16" or "bfloat16"

    @property
    def harm(self) -> str:
        """What the cast does to mixed-precision training."""
        if self.dtype == "float16":
            return "GradScaler cannot unscale float16 gradients"
        return "the optimizer would step bfloat16 weights, losing small updates"


_FLOAT32 = {"torch.float32", "torch.float", "torch.FloatTensor", "torch.cuda.FloatTensor"}


def _to_float32(call: cst.Call, facts: ModuleFacts) -> bool:
    """`.float()`, `.to(torch.float32)`, `.type(torch.float32)`."""
    func = call.func
    assert isinstance(func, cst.Attribute)
    if func.attr.value == "float":
        return not call.args
    return func.attr.value in ("to", "type") and any(
        facts.imports.resolve(arg.value) in _FLOAT32 for arg in call.args
        if arg.keyword is None or arg.keyword.value == "dtype")


def _stored_in_collection(call: cst.Call, around: cst.CSTNode) -> bool:
    """`call` is an element of a dict, list, tuple or set display within `around`."""
    todo = [around]
    while todo:
        node = todo.pop()
        if isinstance(node, (cst.DictElement, cst.Element)) and node.value is call:
            return True
        todo.extend(node.children)
    return False


def _not_the_trained_object(site_call: cst.Call, around: cst.CSTNode | None,
                            refloated: set[int]) -> bool:
    """A cast whose low-precision result no training sees: cast back to float32 at once
    (`model.half().float()`, rounding), or of an object made right there (a copy, a load)
    and stored in a collection (`{"model": deepcopy(model).half()}`, a checkpoint)."""
    if id(site_call) in refloated:
        return True
    func = site_call.func
    assert isinstance(func, cst.Attribute)
    return (isinstance(func.value, cst.Call) and around is not None
            and _stored_in_collection(site_call, around))


def low_precision_casts(facts: ModuleFacts) -> list[ManualCast]:
    """Every cast by hand to a low-precision dtype that a training step may see, in source
    order (not one cast back to float32 at once, nor a fresh copy stored in a checkpoint)."""
    casts = []
    refloated = {id(site.call.func.value) for site in facts.calls
                 if isinstance(site.call.func, cst.Attribute)
                 and isinstance(site.call.func.value, cst.Call)
                 and _to_float32(site.call, facts)}
    for site in facts.calls:
        func = site.call.func
        if not isinstance(func, cst.Attribute):
            continue
        method = func.attr.value
        dtype = None if site.call.args else low_cast_method(method)
        if method in ("to", "type"):
            dtype = next((_LOW_PRECISION[resolved] for arg in site.call.args
                          if arg.keyword is None or arg.keyword.value == "dtype"
                          if (resolved := facts.imports.resolve(arg.value)) in _LOW_PRECISION),
                         None)
        if dtype is not None and not _not_the_trained_object(
                site.call, site.small or site.statement, refloated):
            casts.append(ManualCast(site.call, facts.one_line(site.call), dtype))
    return casts


def manual_casts(facts: ModuleFacts) -> list[Note]:
    """apex says never cast by hand under AMP: each cast reported, left as it is."""
    return [Note(MANUAL_CAST, cast.call, f"`{cast.text}` casts by hand; under autocast, keep "
                 f"the model and inputs in float32 ({cast.harm})")
            for cast in low_precision_casts(facts)]


def unscaled_autograd_grad(
    facts: ModuleFacts, functions: set[cst.FunctionDef | None]
) -> list[Note]:
    """`torch.autograd.grad(...)` inside a training step (gradient penalties)."""
    notes = []
    for site in facts.calls:
        if site.function in functions and facts.imports.resolve(site.call.func) == (
            "torch.autograd.grad"
        ):
            notes.append(Note(AUTOGRAD_GRAD, site.call,
                              "`torch.autograd.grad(...)` is left unscaled: "
                              "the penalty stays correct, but float16 gradients may underflow "
                              "(see the AMP recipe on gradient penalties to scale it by hand)"))
    return notes


def uses_fsdp(facts: ModuleFacts) -> bool:
    """FSDP shards gradients: its scaler must all-reduce found-inf across ranks."""
    return any(
        target.startswith(("torch.distributed.fsdp", "torch.distributed._composable.fsdp"))
        for target in facts.imports.aliases.values()
    )
