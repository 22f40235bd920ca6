"""Sigmoid probabilities fed to binary cross-entropy: they saturate in low precision.

A model whose last op is a sigmoid, run under autocast, returns bfloat16/float16
probabilities: near 1 they round to exactly 1.0 and the BCE loss jumps. Casting them to
float32 afterwards is too late. Where the sigmoid is a call in `forward` (`torch.sigmoid(h)`,
`self.sigmoid(h)` on an `nn.Sigmoid()`), its input is cast instead (`torch.sigmoid(h.float())`:
autocast leaves sigmoid in its input's dtype, so the probabilities are float32). A sigmoid
that is the last layer of an `nn.Sequential` cannot be reached that way: those sites are
reported with the logits form (drop the sigmoid, use `BCEWithLogitsLoss`), the author's call.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts, Statement
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
    cast: cst.BaseExpression | None = None  # the sigmoid's input, when a `.float()` there fixes it
    sequential: cst.Call | None = None  # the `nn.Sequential(..., nn.Sigmoid())` model built


def saturating_inputs(moved: list[UnsafeLoss], facts: ModuleFacts) -> list[SaturatingInput]:
    found = []
    for loss in moved:
        for call in loss.calls:
            hit = _sigmoid_source(call.args[0].value, loss.statement, facts)
            if hit is not None:
                found.append(SaturatingInput(call, *hit[:3], sequential=hit[3]))
    return found


_Source = tuple[str, str, "cst.BaseExpression | None", "cst.Call | None"]


def _sigmoid_source(
    node: cst.BaseExpression, statement: Statement, facts: ModuleFacts
) -> _Source | None:
    """Where the sigmoid feeding a BCE input is, the advice, and the input to cast (if any)."""
    node = _peel(node)
    if _is_sigmoid(node, facts):
        return "a sigmoid", "pass the logits to `nn.BCEWithLogitsLoss` instead", None, None
    key = dotted(node)
    if key is not None:  # `p = disc(x).view(-1)` earlier in the function
        function = facts.statements[statement].function if statement in facts.statements \
            else None
        order = facts.order.get(statement, 0)
        earlier = [b for b in facts.bindings if b.keys == (key,) and b.function is function
                   and facts.order.get(b.statement, 0) < order]
        if not earlier:
            return None
        node = _peel(earlier[-1].value)
        if _is_sigmoid(node, facts):  # `recon = torch.sigmoid(model(x))`: cast its input
            return ("a sigmoid", "pass the logits to `nn.BCEWithLogitsLoss` instead",
                    _sigmoid_input(node), None)
    if not isinstance(node, cst.Call):
        return None
    model = dotted(node.func)
    if model is None:
        return None
    return _model_ends_in_sigmoid(model, facts)


def _model_ends_in_sigmoid(model: str, facts: ModuleFacts) -> _Source | None:
    built = [_peel(b.value) for b in facts.bindings if b.keys == (model,)]  # `Net().to(dev)`
    for value in built:
        if _sequential_ends_in_sigmoid(value, facts):
            assert isinstance(value, cst.Call)
            return (f"`{model}`, whose last layer is `nn.Sigmoid()`",
                    "drop that layer and use `nn.BCEWithLogitsLoss` (autocast-safe)", None,
                    value if len(built) == 1 else None)
        if not isinstance(value, cst.Call):
            continue
        cls = next((c for c in facts.classes if c.name.value == dotted(value.func)), None)
        ends, cast, layer = _forward_ending(cls, facts) if cls is not None else (
            False, None, None)
        if ends:
            assert cls is not None
            return (f"`{model}`, whose `{cls.name.value}.forward` ends in a sigmoid",
                    "return the logits from `forward` and use `nn.BCEWithLogitsLoss` "
                    "(autocast-safe)", cast, layer)
    return None


def _forward_ending(
    cls: cst.ClassDef, facts: ModuleFacts
) -> tuple[bool, cst.BaseExpression | None, cst.Call | None]:
    """Whether `cls.forward` ends in a sigmoid, the input of that sigmoid call when one
    `.float()` there reaches it, and the `nn.Sequential(..., nn.Sigmoid())` it returns where
    `__init__` builds it once (`self.main = nn.Sequential(...)`)."""
    methods = {f.name.value: f for f, owner in facts.function_class.items() if owner is cls}
    forward = methods.get("forward")
    if forward is None:
        return False, None, None
    returns = [n for n in descendants(forward.body) if isinstance(n, cst.Return) and n.value]
    if not returns:
        return False, None, None
    value = _peel(returns[-1].value)  # type: ignore[arg-type]
    key = dotted(value)
    if key is not None:  # `validity = self.model(img); return validity`
        bound = [b.value for b in facts.bindings if b.function is forward and b.keys == (key,)]
        if not bound:
            return False, None, None
        value = _peel(bound[-1])
    if not (isinstance(value, cst.Call) and (dotted(value.func) or "").startswith("self.")):
        return (True, _sigmoid_input(value), None) if _is_sigmoid(value, facts) else (
            False, None, None)
    init = methods.get("__init__")
    layers = [b.value for b in facts.bindings
              if init is not None and b.function is init and b.keys == (dotted(value.func),)]
    if any(_sequential_ends_in_sigmoid(layer, facts) for layer in layers):
        built = layers[0] if len(layers) == 1 else None
        return True, None, built if isinstance(built, cst.Call) else None
    if layers and all(isinstance(layer, cst.Call)
                      and facts.imports.resolve(layer.func) == "torch.nn.Sigmoid"
                      for layer in layers):
        return True, _sigmoid_input(value), None  # `self.sigmoid = nn.Sigmoid()`
    return False, None, None


def _sigmoid_input(call: cst.BaseExpression) -> cst.BaseExpression | None:
    """The input of `torch.sigmoid(h)`, `self.sigmoid(h)`, `h.sigmoid()` (None: not one)."""
    assert isinstance(call, cst.Call)
    plain = [a for a in call.args if a.keyword is None and not a.star]
    if len(call.args) == 1 and plain:
        return plain[0].value
    if not call.args and isinstance(call.func, cst.Attribute):
        return call.func.value
    return None


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
