"""Code that mixed precision makes risky and that the rewrite reports without changing it."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

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

_LOW_PRECISION = {"torch.float16": "float16", "torch.half": "float16",
                  "torch.bfloat16": "bfloat16", "torch.HalfTensor": "float16",
                  "torch.cuda.HalfTensor": "float16", "torch.BFloat16Tensor": "bfloat16"}
_METHODS = {"half": "float16", "bfloat16": "bfloat16"}


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


def low_precision_casts(facts: ModuleFacts) -> list[ManualCast]:
    """Every cast by hand to a low-precision dtype, in source order."""
    casts = []
    for site in facts.calls:
        func = site.call.func
        if not isinstance(func, cst.Attribute):
            continue
        method = func.attr.value
        dtype = None if site.call.args else _METHODS.get(method)
        if method in ("to", "type"):
            dtype = next((_LOW_PRECISION[resolved] for arg in site.call.args
                          if arg.keyword is None or arg.keyword.value == "dtype"
                          if (resolved := facts.imports.resolve(arg.value)) in _LOW_PRECISION),
                         None)
        if dtype is not None:
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
