"""Data-dependent initialisations in a module that only defines models.

Glow's ActNorm sets its parameters from the first batch inside `forward`
(`self.s.data = -torch.log(x.std(0))`). Under a training script's autocast that batch may be
the low-precision output of the layer before, and assigning `.data` replaces the tensor, dtype
included: the parameter becomes low precision and the scaler refuses its gradients. The
values taking the parameter's dtype is right in every dtype, so the module gets that edit
whichever script trains it.
"""

from __future__ import annotations

import libcst as cst

from amprewrite.analysis.escapes import DATA_REPLACED, Escape, replaces_own_data
from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.float16_constants import model_module_forwards
from amprewrite.analysis.kinds import KindTable
from amprewrite.analysis.tree import descendants


def model_module_data_inits(facts: ModuleFacts, kinds: KindTable) -> list[Escape]:
    """`self.s.data = values` in the forwards of the module's models (and what they call):
    `values` to take `self.s`'s dtype."""
    classes = kinds.model_classes()
    found = []
    for function in model_module_forwards(facts, classes) if classes else ():
        for node in descendants(function.body):
            if type(node) is not cst.Assign:
                continue
            for target in node.targets:
                if type(target.target) is cst.Attribute and replaces_own_data(
                        target.target, node.value):
                    statement = facts.statements_around(node)[0]
                    found.append(Escape(node.value, statement, DATA_REPLACED,
                                        like=target.target.value))
    return found
