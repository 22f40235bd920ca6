"""Sigmoid probabilities fed to binary cross-entropy: they saturate in low precision.

A model whose last op is a sigmoid, run under autocast, returns bfloat16/float16
probabilities: near 1 they round to exactly 1.0 and the BCE loss jumps. Casting them to
float32 afterwards is too late. The fix is the logits form (drop the sigmoid, use
`BCEWithLogitsLoss`), which is the author's call: these sites are reported, not rewritten.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.names import dotted
from amprewrite.analysis.tree import descendants
from amprewrite.analysis.unsafe_losses import UnsafeLoss

_SIGMOIDS = frozenset({"torch.sigmoid", "torch.nn.functional.sigmoid"})
_PASS_THROUGH = frozenset({"view", "squeeze", "unsqueeze", "reshape", "flatten", "contiguous",
                           "float", "detach", "to", "cpu", "cuda"})


@dataclass(frozen=True)
class SaturatingInput:
    """A BCE input computed by a sigmoid under autocast."""

    call: cst.Call  # the loss call
    source: str  # where the sigmoid is, in words
    advice: str  # how to switch to logits


def saturating_inputs(moved: list[UnsafeLoss], facts: ModuleFacts) -> list[SaturatingInput]:
    found = []
    for loss in moved:
        for call in loss.calls:
            hit = _sigmoid_source(call.args[0].value, loss.statement, facts)
            if hit is not None:
                found.append(SaturatingInput(call, *hit))
    return found


def _sigmoid_source(
    node: cst.BaseExpression, statement: cst.CSTNode, facts: ModuleFacts
) -> tuple[str, str] | None:
    node = _peel(node)
    if _is_sigmoid(node, facts):
        return "a sigmoid", "pass the logits to `nn.BCEWithLogitsLoss` instead"
    key = dotted(node)
    if key is not None:  # `p = disc(x).view(-1)` earlier in the function
        function = facts.statements[statement].function if statement in facts.statements \
            else None
        order = facts.order.get(statement, 0)  # type: ignore[call-overload]
        earlier = [b for b in facts.bindings if b.keys == (key,) and b.function is function
                   and facts.order.get(b.statement, 0) < order]
        if not earlier:
            return None
        node = _peel(earlier[-1].value)
    if not isinstance(node, cst.Call):
        return None
    model = dotted(node.func)
    if model is None:
        return None
    return _model_ends_in_sigmoid(model, facts)


def _model_ends_in_sigmoid(model: str, facts: ModuleFacts) -> tuple[str, str] | None:
    built = [b.value for b in facts.bindings if b.keys == (model,)]
    for value in built:
        if _sequential_ends_in_sigmoid(value, facts):
            return (f"`{model}`, whose last layer is `nn.Sigmoid()`",
                    "drop that layer and use `nn.BCEWithLogitsLoss` (autocast-safe)")
        if not isinstance(value, cst.Call):
            continue
        cls = next((c for c in facts.classes if c.name.value == dotted(value.func)), None)
        if cls is not None and _forward_ends_in_sigmoid(cls, facts):
            return (f"`{model}`, whose `{cls.name.value}.forward` ends in a sigmoid",
                    "return the logits from `forward` and use `nn.BCEWithLogitsLoss` "
                    "(autocast-safe)")
    return None


def _forward_ends_in_sigmoid(cls: cst.ClassDef, facts: ModuleFacts) -> bool:
    methods = {f.name.value: f for f, owner in facts.function_class.items() if owner is cls}
    forward = methods.get("forward")
    if forward is None:
        return False
    returns = [n for n in descendants(forward.body) if isinstance(n, cst.Return) and n.value]
    if not returns:
        return False
    value = _peel(returns[-1].value)  # type: ignore[arg-type]
    key = dotted(value)
    if key is not None:  # `validity = self.model(img); return validity`
        bound = [b.value for b in facts.bindings if b.function is forward and b.keys == (key,)]
        if not bound:
            return False
        value = _peel(bound[-1])
    if _is_sigmoid(value, facts):
        return True
    if isinstance(value, cst.Call) and (dotted(value.func) or "").startswith("self."):
        init = methods.get("__init__")
        layer = dotted(value.func)
        return init is not None and any(
            _sequential_ends_in_sigmoid(b.value, facts)
            for b in facts.bindings if b.function is init and b.keys == (layer,))
    return False


def _sequential_ends_in_sigmoid(value: cst.BaseExpression, facts: ModuleFacts) -> bool:
    if not (isinstance(value, cst.Call)
            and facts.imports.resolve(value.func) == "torch.nn.Sequential" and value.args):
        return False
    last = value.args[-1].value
    return isinstance(last, cst.Call) and facts.imports.resolve(last.func) == "torch.nn.Sigmoid"


def _is_sigmoid(node: cst.BaseExpression, facts: ModuleFacts) -> bool:
    if not isinstance(node, cst.Call):
        return False
    if isinstance(node.func, cst.Attribute) and node.func.attr.value == "sigmoid":
        return facts.imports.resolve(node.func) in _SIGMOIDS or not node.args
    return facts.imports.resolve(node.func) in _SIGMOIDS


def _peel(node: cst.BaseExpression) -> cst.BaseExpression:
    """`disc(x).view(-1)` -> `disc(x)`: reshapes and moves keep what the value is."""
    while (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
           and node.func.attr.value in _PASS_THROUGH):
        node = node.func.value
    return node
