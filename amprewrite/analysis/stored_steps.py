"""A training step split over methods that hand each other the forward pass's results through
attributes, as fastai-style Learners and their callbacks do:

    def predict(self):  self.preds = self.model(self.batch[0])
    def get_loss(self): self.loss = self.loss_func(self.preds, self.batch[1])
    def backward(self): self.loss.backward()

(or `learn.preds = learn.model(...)` in a callback's `predict(self, learn)`). The backward's
loss is stored by a statement that computes a loss from other stored values, which a forward
pass stored: that statement and the forward pass are autocast where they run. Only where
nothing else reads the stored values (a metric's `.numpy()` of a low-precision `self.preds`
would crash), and only in the consumer's own class.
"""

from __future__ import annotations

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts, Statement
from amprewrite.analysis.kinds import Kind, KindTable, kind_from_name
from amprewrite.analysis.names import bound_keys, dotted, iter_keys
from amprewrite.analysis.statements import calls_in
from amprewrite.analysis.summaries import Summaries
from amprewrite.analysis.training_step import Region
from amprewrite.analysis.tree import descendants

_DEPTH = 3  # stored values followed back from the loss


def stored_chain(
    consumer: cst.FunctionDef | None, backward: Statement, needed: set[str],
    facts: ModuleFacts, kinds: KindTable, summaries: Summaries,
) -> list[Region]:
    """The regions of the statements that store the loss `needed` names and the forward
    passes it is computed from, in other methods of `consumer`'s class; none unless the
    chain reaches a forward pass and nothing outside it reads what it stores."""
    if consumer is None or (cls := facts.function_class.get(consumer)) is None:
        return []
    chain: list[Statement] = []
    if not _follow(_stored(needed), consumer, cls, facts, kinds, summaries, chain, _DEPTH):
        return []
    stored = {key for statement in chain for key in bound_keys(statement) if "." in key}
    if not _read_only_by({*chain, backward}, stored, cls, facts):
        return []
    return [Region(*facts.position(statement), facts.position(statement)[1])
            for statement in chain]


def _stored(keys: set[str]) -> set[str]:
    """The attributes among `keys` (`self.loss`, `learn.preds`), not their owners."""
    return {key for key in keys if "." in key and not any(
        other.startswith(f"{key}.") for other in keys)}


def _follow(
    keys: set[str], consumer: cst.FunctionDef, cls: cst.ClassDef, facts: ModuleFacts,
    kinds: KindTable, summaries: Summaries, chain: list[Statement], depth: int,
) -> bool:
    """Where `keys` are stored, in other methods of `cls` that reach them by the same name, by
    a forward pass or by a loss computed from values so stored: those statements join
    `chain` (a store of another kind, `self.loss_func = loss_func`, is setup); True when a
    forward pass is reached."""
    if depth == 0:
        return False
    reached = False
    for key in keys:
        for statement, info in facts.statements.items():
            function = info.function
            if (function is None or function is consumer or statement in chain
                    or not isinstance(statement, cst.SimpleStatementLine)
                    or key not in bound_keys(statement)
                    or not _same_object(key, consumer, function, cls, facts)):
                continue
            if _runs_forward(statement, function, kinds, summaries) or (
                    summaries.of_node(statement, function).loss and _follow(
                        _stored(set(iter_keys(statement)) - bound_keys(statement)), function,
                        cls, facts, kinds, summaries, chain, depth - 1)):
                reached = True
                chain.append(statement)
    return reached


def _same_object(
    key: str, consumer: cst.FunctionDef, function: cst.FunctionDef, cls: cst.ClassDef,
    facts: ModuleFacts,
) -> bool:
    """`function` is another method of `cls` where `key`'s owner is the same object: `self`,
    or a parameter both methods name alike (a callback's `learn`)."""
    if facts.function_class.get(function) is not cls:
        return False
    owner = key.split(".", 1)[0]
    return owner == "self" or (owner in _parameters(function, facts) and owner in _parameters(
        consumer, facts))


def _parameters(function: cst.FunctionDef, facts: ModuleFacts) -> set[str]:
    positional, keyword_only = facts.parameters(function)
    return {*positional, *keyword_only}


def _runs_forward(
    statement: Statement, function: cst.FunctionDef | None, kinds: KindTable,
    summaries: Summaries,
) -> bool:
    """A model runs in `statement`: a known one, or an attribute named as one on the object
    the methods share (`learn.model(x)`)."""
    if summaries.of_node_direct(statement, function).forward:
        return True
    return any(isinstance(call.func, cst.Attribute)
               and kind_from_name(dotted(call.func), (Kind.MODEL,)) is Kind.MODEL
               for call in calls_in(statement))


def _read_only_by(
    allowed: set[Statement], stored: set[str], cls: cst.ClassDef, facts: ModuleFacts
) -> bool:
    """No statement outside `allowed` reads the stored values (`self.x` in the methods of
    `cls` and the classes it derives from or that derive from it), but for what no low
    precision reaches (`self.loss.item()`, `self.preds.argmax(1)`, `.float()`, `.shape`)."""
    harmless = {id(node.value) for node in descendants(facts.module)
                if type(node) is cst.Attribute and node.attr.value in _HARMLESS}
    family = _family(cls, facts)
    for node in descendants(facts.module):
        key = dotted(node) if type(node) is cst.Attribute else None
        if key not in stored or id(node) in harmless:
            continue
        statement = facts.owner.get(id(node))
        if statement is None or statement in allowed or _assigned(node, statement):
            continue
        function = facts.statements[statement].function
        if str(key).startswith("self.") and (
                function is None or facts.function_class.get(function) not in family):
            continue
        return False
    return True


def _family(cls: cst.ClassDef, facts: ModuleFacts) -> set[cst.ClassDef]:
    """`cls`, the file's classes it derives from, and those deriving from it (not its
    siblings: their `self` is another object)."""
    return {other for other in facts.classes
            if cls in _lineage(other, facts) or other in _lineage(cls, facts)}


def _lineage(cls: cst.ClassDef, facts: ModuleFacts) -> list[cst.ClassDef]:
    """`cls` and the file's classes it derives from, nearest first."""
    by_name = {other.name.value: other for other in facts.classes}
    lineage = [cls]
    while True:
        bases = [by_name.get(dotted(base.value) or "") for base in lineage[-1].bases]
        parent = next((b for b in bases if b is not None and b not in lineage), None)
        if parent is None:
            return lineage
        lineage.append(parent)


# What a read of a low-precision tensor may go on to that gives no low-precision value.
_HARMLESS = frozenset({"item", "tolist", "float", "argmax", "argmin", "shape", "size", "dtype",
                       "device", "numel", "dim", "ndim"})


def _assigned(node: cst.CSTNode, statement: Statement | None) -> bool:
    """`node` is a target `statement` assigns (`self.preds = ...`), not a read."""
    if not isinstance(statement, cst.SimpleStatementLine):
        return False
    return any((isinstance(small, cst.Assign) and any(t.target is node for t in small.targets))
               or (isinstance(small, cst.AnnAssign) and small.target is node)
               for small in statement.body)
