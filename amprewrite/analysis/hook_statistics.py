"""Backward hooks that keep gradient statistics (KFAC's output-gradient covariances): the
gradients they see are the scaled loss's, multiplied by float16's loss scale (65536 at the
start), so every statistic is off by the scale (its square for a covariance) and the
preconditioner the optimizer builds from it is wrong: float16 silently stops learning.
"""

from __future__ import annotations

import libcst as cst

from amprewrite.analysis.dtype.flow import BACKWARD_HOOKS
from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.names import dotted, receiver_key, walk


def scaled_statistics(facts: ModuleFacts) -> list[cst.Call]:
    """The registrations of backward hooks of this module that store what they see in an
    attribute (`self.g[module] = ...`, `self.grads.append(...)`)."""
    by_name = {f.name.value: f for f in facts.functions}
    found = []
    for site in facts.calls:
        func = site.call.func
        if type(func) is not cst.Attribute or func.attr.value not in BACKWARD_HOOKS \
                or not site.call.args:
            continue
        hook = by_name.get((dotted(site.call.args[0].value) or "").removeprefix("self."))
        if hook is not None and _stores_state(hook):
            found.append(site.call)
    return found


def _stores_state(function: cst.FunctionDef) -> bool:
    """Whether `function` keeps something beyond its call: an assignment to an attribute or
    an item of one, or an append to one."""
    for node in walk(function.body):
        if isinstance(node, cst.Assign | cst.AugAssign):
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) \
                else [node.target]
            if any(type(t) in (cst.Attribute, cst.Subscript) for t in targets):
                return True
        elif type(node) is cst.Call and type(node.func) is cst.Attribute \
                and node.func.attr.value in ("append", "extend", "update", "add_", "copy_") \
                and (receiver_key(node.func.value) or "").startswith("self."):
            return True
    return False
