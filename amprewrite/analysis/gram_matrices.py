"""Gram matrices under autocast: a tensor multiplied by its own transpose overflows float16.

`torch.mm(f, f.t())` sums squares over a whole feature map (neural style transfer's style
loss, feature-correlation losses): in float16, whose largest value is 65504, the entries
become inf and every step is skipped. bfloat16 has float32's range and is safe. The fix needs
autocast off for that product (`with autocast(enabled=False): g = torch.mm(f.float(),
f.float().t())`), a change of structure this rewrite does not make: each such product run
under autocast is reported.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.float16_constants import functions_run
from amprewrite.analysis.kinds import KindTable
from amprewrite.analysis.training_step import Note, Region
from amprewrite.analysis.tree import descendants
from amprewrite.catalog import SKIP, declare

GRAM_MATRIX = declare(
    "AMP146", SKIP, "Gram matrix under autocast may overflow float16",
    "A tensor multiplied by its own transpose (`torch.mm(f, f.t())`, `f @ f.T`, `torch.bmm(f, "
    "f.transpose(1, 2))`: a style loss, feature correlations) sums squares over a whole feature "
    "map: in float16 (largest value 65504) the entries overflow to inf and every step is "
    "skipped. Compute the product in float32, `with autocast(enabled=False): gram = "
    "torch.mm(f.float(), f.float().t())`; bfloat16 has float32's range and is safe.",
    why=(
        "A tensor is multiplied by its own transpose (a Gram matrix) inside an autocast "
        "region."
    ),
    example="gram = torch.mm(features, features.t())   # in float16 the sums overflow",
)

_PRODUCTS = frozenset({"mm", "matmul", "bmm"})
_TRANSPOSES = frozenset({"t", "transpose", "permute", "T", "mT", "mH", "H"})


def gram_matrices(facts: ModuleFacts, kinds: KindTable, regions: Iterable[Region]) -> list[Note]:
    """Products of a tensor with its transpose run under autocast (in a region, or in a
    model method or helper a region calls)."""
    regions = list(regions)
    statements = [s for region in regions for s in region.statements]
    roots: list[cst.CSTNode] = [*statements,
                                *(f.body for f in functions_run(regions, facts, kinds))]
    notes, seen = [], set()
    for root in roots:
        for node in _products(root, facts):
            if id(node) not in seen:
                seen.add(id(node))
                text = facts.one_line(node)
                notes.append(Note(GRAM_MATRIX, node, f"`{text}` multiplies a tensor by its own "
                                  "transpose under autocast: in float16 its sums of squares "
                                  "overflow to inf; compute it in float32 (`with autocast("
                                  "enabled=False):` on `.float()` operands)"))
    return notes


def _products(root: cst.CSTNode, facts: ModuleFacts) -> Iterator[cst.CSTNode]:
    for node in descendants(root):
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
            if _is_transpose_of(node.right, node.left, facts):
                yield node
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
                and node.func.attr.value in _PRODUCTS:
            args = [a.value for a in node.args if a.keyword is None and not a.star]
            resolved = facts.imports.resolve(node.func) or ""
            if resolved.startswith("torch.") and len(args) == 2:
                left, right = args  # torch.mm(f, f.t())
            elif not resolved and len(args) == 1:
                left, right = node.func.value, args[0]  # f.mm(f.t())
            else:
                continue
            if _is_transpose_of(right, left, facts):
                yield node


def _is_transpose_of(
    node: cst.BaseExpression, of: cst.BaseExpression, facts: ModuleFacts
) -> bool:
    """`f.t()`, `f.T`, `f.transpose(1, 2)` of the same expression as `of` (same source)."""
    if isinstance(node, cst.Attribute) and node.attr.value in _TRANSPOSES:
        inner = node.value
    elif (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
          and node.func.attr.value in _TRANSPOSES):
        inner = node.func.value
    else:
        return False
    code = facts.module.code_for_node
    return "".join(code(inner).split()) == "".join(code(of).split())
