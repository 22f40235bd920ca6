"""Code that mixed precision makes risky and that the rewrite reports without changing it."""

from __future__ import annotations

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import SKIP, declare

MANUAL_CAST = declare(
    "AMP140", SKIP, "manual cast to a low-precision dtype",
    "apex's rule holds: never cast the model or inputs by hand under AMP; remove the cast and "
    "let autocast pick the precision per operation.",
)

AUTOGRAD_GRAD = declare(
    "AMP208", SKIP, "`torch.autograd.grad` in a training step",
    "Left unscaled: results stay correct, but float16 gradients may underflow. Scale the outputs "
    "and unscale the gradients as in the AMP recipe.",
)

_LOW_PRECISION = frozenset({"torch.float16", "torch.half", "torch.bfloat16",
                            "torch.HalfTensor", "torch.cuda.HalfTensor", "torch.BFloat16Tensor"})


def manual_casts(facts: ModuleFacts) -> list[Note]:
    """`.half()`, `.bfloat16()`, `.to(torch.float16)`: apex says never cast by hand under AMP."""
    notes = []
    for site in facts.calls:
        func = site.call.func
        if not isinstance(func, cst.Attribute):
            continue
        method = func.attr.value
        casts = method in ("half", "bfloat16") and not site.call.args
        if method in ("to", "type"):
            casts = any(facts.imports.resolve(arg.value) in _LOW_PRECISION
                        for arg in site.call.args if arg.keyword is None
                        or arg.keyword.value == "dtype")
        if casts:
            text = facts.one_line(site.call)
            notes.append(Note(MANUAL_CAST, site.call,
                              f"`{text}` casts by hand; under autocast, keep "
                              "the model and inputs in float32 (GradScaler cannot unscale "
                              "float16 gradients)"))
    return notes


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
