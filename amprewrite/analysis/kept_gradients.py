"""A `zero_grad` that keeps the gradients: the file's own `zero_grad()` method scales them in
place instead of zeroing them (`for p in self.model.parameters(): p.grad *= self.mom`, a
Learner's momentum trick). Through a scaler, what it keeps was unscaled by the last step and is
added to the next step's scaled gradients, which the scaler then divides by the scale: the kept
part all but vanishes in float16. The optimizer steps of that class stay FP32.
"""

from __future__ import annotations

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.names import dotted
from amprewrite.analysis.sites import StepSite
from amprewrite.analysis.tree import descendants
from amprewrite.catalog import SKIP, declare

GRADIENTS_KEPT_ACROSS_STEPS = declare(
    "AMP226", SKIP, "gradients kept across optimizer steps",
    "The class's `zero_grad()` changes `.grad` in place instead of zeroing it, so each step "
    "adds new gradients to what the last one left. A grad scaler unscales in place at each "
    "step: the kept part, already unscaled, would be divided by the scale again at the next. "
    "The step stays FP32; to use AMP, keep the running sum in a buffer of your own, zero the "
    "gradients, and add the buffer after `scaler.unscale_(optimizer)`.",
    why=("The stepping class's own `zero_grad()` writes `.grad` in place (`p.grad *= mom`) "
         "instead of zeroing it."),
    example=(
        "def zero_grad(self):\n"
        "    for p in self.model.parameters():\n"
        "        p.grad *= self.mom   # kept for the next step"
    ),
)


def keeps_gradients(step: StepSite, facts: ModuleFacts) -> cst.FunctionDef | None:
    """The `zero_grad` method that keeps the gradients it should zero, of `step`'s class or of
    a subclass of the file that inherits the step (the one its instances run: their own, else
    their nearest base's)."""
    cls = facts.function_class.get(step.function) if step.function is not None else None
    if cls is None:
        return None
    for family in (cls, *_subclasses(cls, facts)):
        method = _resolved(family, "zero_grad", facts)
        if method is not None and _keeps(method):
            return method
    return None


def _resolved(cls: cst.ClassDef, name: str, facts: ModuleFacts) -> cst.FunctionDef | None:
    """`cls.name`: its own method, else its nearest base's in the file."""
    seen: set[int] = set()
    current: cst.ClassDef | None = cls
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        method = facts.method(current, name)
        if method is not None:
            return method
        current = _local_base(current, facts)
    return None


def _local_base(cls: cst.ClassDef, facts: ModuleFacts) -> cst.ClassDef | None:
    names = {dotted(base.value) for base in cls.bases}
    return next((other for other in facts.classes if other.name.value in names), None)


def _subclasses(cls: cst.ClassDef, facts: ModuleFacts) -> list[cst.ClassDef]:
    """The file's classes deriving from `cls`, directly or not."""
    found: list[cst.ClassDef] = []
    frontier = [cls]
    while frontier:
        parent = frontier.pop()
        for other in facts.classes:
            if other not in found and other is not cls and _local_base(other, facts) is parent:
                found.append(other)
                frontier.append(other)
    return found


def _keeps(function: cst.FunctionDef) -> bool:
    """Writes `.grad` in place (`p.grad *= m`, `p.grad.mul_(m)`) and never zeroes it."""
    writes = zeroes = False
    for node in descendants(function.body):
        if type(node) is cst.AugAssign and _grad(node.target):
            writes = True
        elif type(node) is cst.Call and type(node.func) is cst.Attribute:
            method = node.func.attr.value
            if method in ("zero_", "zero_grad"):
                zeroes = True
            elif method.endswith("_") and _grad(node.func.value):
                writes = True
        elif type(node) is cst.Assign and any(_grad(t.target) for t in node.targets):
            zeroes = True  # `p.grad = None`, or replaced
    return writes and not zeroes


def _grad(node: cst.BaseExpression) -> bool:
    """`p.grad` or `p.grad.data`."""
    if type(node) is cst.Attribute and node.attr.value == "data":
        node = node.value
    return type(node) is cst.Attribute and node.attr.value == "grad"
