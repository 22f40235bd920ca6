"""Buffers a model updates in its own forward pass and multiplies under autocast.

An exponential-moving-average codebook (VQ-VAE's `Quantize`: `self.embed.data.copy_(
self.embed_avg / cluster_size)`) or any statistic a forward keeps in a registered buffer has
no bound: never-used codes reach 1e5. A product with it under autocast (`flatten @
self.embed`) casts it to float16, whose largest value is 65504: inf, then NaN losses. bfloat16
has float32's range. The product is reported in every model class of the module (its forward
may run under a training script's autocast elsewhere); keeping it in float32 (`with
autocast(enabled=False)` around the call, `.float()` operands) is a change of structure this
rewrite does not make.
"""

from __future__ import annotations

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.names import dotted
from amprewrite.analysis.training_step import Note
from amprewrite.analysis.tree import descendants
from amprewrite.catalog import SKIP, declare

BUFFER_PRODUCT = declare(
    "AMP147", SKIP, "buffer updated in forward multiplied under autocast",
    "A registered buffer the forward pass writes (an EMA codebook or statistic) has no bound: "
    "its entries can exceed float16's largest value, 65504 (VQ-VAE's never-used codes reach "
    "1e5), and a product with it under float16 autocast gives inf and NaN losses. Compute "
    "that product in float32 (`with autocast(enabled=False):` around it, `.float()` operands); "
    "bfloat16 has float32's range and is safe.",
    why=(
        "A buffer that the forward pass updates (an EMA codebook) is multiplied under "
        "autocast."
    ),
    example=(
        "codebook.mul_(decay).add_(update)   # a buffer the forward updates\n"
        "d = z @ self.codebook.t()"
    ),
)

_IN_PLACE = frozenset({"copy_", "mul_", "add_", "sub_", "div_", "lerp_", "fill_", "zero_",
                       "clamp_", "index_add_", "scatter_add_"})
_PRODUCTS = frozenset({"mm", "matmul", "bmm", "einsum", "linear", "cdist"})


def buffer_products(facts: ModuleFacts) -> list[Note]:
    """Products, in a model class's forward, of a buffer that forward updates in place."""
    notes: list[Note] = []
    for cls in facts.classes:
        buffers = _registered_buffers(cls)
        if not buffers:
            continue
        for function in facts.functions:
            if facts.function_class.get(function) is not cls or function.name.value != "forward":
                continue
            updated = _updated(function, buffers)
            for node, buffer in _products_of(function, updated):
                notes.append(Note(BUFFER_PRODUCT, node, f"`{buffer}` is a buffer this forward "
                                  "updates (an EMA statistic, unbounded) and enters this product "
                                  "under autocast: in float16 entries above 65504 become inf; "
                                  "compute it in float32"))
    return notes


def _registered_buffers(cls: cst.ClassDef) -> set[str]:
    """`self.embed` for every `self.register_buffer("embed", ...)` of the class."""
    found = set()
    for node in descendants(cls.body):
        if (type(node) is cst.Call and dotted(node.func) == "self.register_buffer"
                and node.args and type(name := node.args[0].value) is cst.SimpleString
                and isinstance(value := name.evaluated_value, str)):
            found.add(f"self.{value}")
    return found


def _updated(function: cst.FunctionDef, buffers: set[str]) -> set[str]:
    """The buffers `function` changes in place (`self.embed.data.copy_(...)`)."""
    found = set()
    for node in descendants(function.body):
        if (type(node) is cst.Call and type(node.func) is cst.Attribute
                and node.func.attr.value in _IN_PLACE):
            key = (dotted(node.func.value) or "").removesuffix(".data")
            if key in buffers:
                found.add(key)
    return found


def _products_of(
    function: cst.FunctionDef, buffers: set[str]
) -> list[tuple[cst.CSTNode, str]]:
    found: list[tuple[cst.CSTNode, str]] = []
    if not buffers:
        return found
    for node in descendants(function.body):
        operands: list[cst.CSTNode] = []
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator,
                                                                cst.MatrixMultiply):
            operands = [node.left, node.right]
        elif isinstance(node, cst.Call) and (dotted(node.func) or "").rsplit(".", 1)[-1] in (
                _PRODUCTS):
            operands = [arg.value for arg in node.args]
        for operand in operands:
            key = next((dotted(n) for n in descendants(operand) if dotted(n) in buffers), None)
            if key is not None:
                found.append((node, key))
                break
    return found
