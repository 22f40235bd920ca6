"""What each function of a module does to a model, directly or through the local functions it
calls: forward passes, losses, backward passes, optimizer steps, reads of `.grad`.

Calls are resolved by name to the functions the module defines (`helper(...)` to a function,
`self.helper(...)` to a method of the caller's class); summaries follow such calls to a
bounded depth, and recursion is harmless.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import libcst as cst

from amprewrite.analysis.facts import CallSite, ModuleFacts
from amprewrite.analysis.forward import is_loss_call, is_model_call
from amprewrite.analysis.kinds import Kind, KindTable
from amprewrite.analysis.memo import per_module
from amprewrite.analysis.names import dotted, walk
from amprewrite.analysis.sites import StepSite, call_sites
from amprewrite.analysis.statements import calls_in, is_backward_call, is_data_call

_DEPTH = 4  # call levels followed through local functions
_AUTOGRAD = frozenset({"torch.autograd.grad", "torch.autograd.backward"})
_FUNCTIONAL_CALLS = frozenset({"torch.func.functional_call",
                               "torch.nn.utils.stateless.functional_call"})


@dataclass(frozen=True)
class Summary:
    """What running a function (or a statement) does, including the local calls it makes."""

    forward: bool = False  # calls a model, or a callable it was given, on data
    loss: bool = False  # computes a loss
    backward: bool = False  # `.backward()`, `torch.autograd.grad` or `torch.autograd.backward`
    steps: bool = False  # steps an optimizer
    reads_grad: bool = False  # reads a `.grad`

    def __or__(self, other: Summary) -> Summary:
        return Summary(*(a or b for a, b in zip(self.fields(), other.fields(), strict=True)))

    def fields(self) -> tuple[bool, ...]:
        return (self.forward, self.loss, self.backward, self.steps, self.reads_grad)


class Summaries:
    """The summary of every function the module defines, and of any statement's calls."""

    def __init__(self, facts: ModuleFacts, kinds: KindTable) -> None:
        self.facts, self.kinds = facts, kinds
        self.sites = call_sites(facts, kinds)
        self._by_name: dict[str, cst.FunctionDef] = {}
        for function in facts.functions:
            if function not in facts.function_class:
                self._by_name.setdefault(function.name.value, function)
        direct = {f: self._direct(f) for f in facts.functions}
        callees = {f: self._callees(f) for f in facts.functions}
        self.functions = dict(direct)
        for _ in range(_DEPTH):
            self.functions = {
                f: _union([direct[f], *(self.functions[g] for g in callees[f])])
                for f in facts.functions
            }

    @cached_property
    def local_calls(self) -> list[tuple[CallSite, cst.FunctionDef]]:
        """Every call of the module that runs one of its functions, with that function."""
        return [(site, callee) for site in self.facts.calls
                if (callee := self.callee(site.call, site.function)) is not None]

    def callee(self, call: cst.Call, caller: cst.FunctionDef | None) -> cst.FunctionDef | None:
        """The local function `call` runs: `name(...)`, or `self.name(...)` in a method."""
        name = dotted(call.func)
        if name is None:
            return None
        if name.startswith("self.") and caller in self.facts.function_class:
            return self.facts.method(self.facts.function_class[caller], name.removeprefix("self."))
        return self._by_name.get(name)

    def of_call(self, call: cst.Call, caller: cst.FunctionDef | None) -> Summary:
        """What `call` does: its own effect, plus its callee's when that is local."""
        summary = self._own(call, caller)
        callee = self.callee(call, caller)
        return summary if callee is None else summary | self.functions[callee]

    def of_node(self, node: cst.CSTNode, caller: cst.FunctionDef | None) -> Summary:
        """What running the calls inside `node` (a statement, an expression) does."""
        return _union([self.of_call(call, caller) for call in calls_in(node)])

    # Direct effects ---------------------------------------------------------------------------
    def _direct(self, function: cst.FunctionDef) -> Summary:
        summary = self.of_node_direct(function.body, function)
        return replace(summary, reads_grad=_reads_grad(function.body))

    def of_node_direct(self, node: cst.CSTNode, function: cst.FunctionDef | None) -> Summary:
        return _union([self._own(call, function) for call in calls_in(node)])

    def _own(self, call: cst.Call, function: cst.FunctionDef | None) -> Summary:
        resolved = self.facts.imports.resolve(call.func)
        return Summary(
            forward=self._is_forward(call, function, resolved),
            loss=is_loss_call(call, self.facts, self.kinds),
            backward=is_backward_call(call) or is_autograd_call(call, self.facts),
            steps=isinstance(site := self.sites.at(call), StepSite)
            and site.kind is not Kind.SCHEDULER,
        )

    def _is_forward(
        self, call: cst.Call, function: cst.FunctionDef | None, resolved: str | None
    ) -> bool:
        if is_model_call(call, self.kinds) or resolved in _FUNCTIONAL_CALLS:
            return True
        if function is None or is_data_call(call, self.facts):
            return False
        # `def fgsm(model, x, y): model(x)`: calling what the function was given.
        params = {p.name.value for p in function.params.params} - {"self", "cls"}
        return dotted(call.func) in params

    def _callees(self, function: cst.FunctionDef) -> set[cst.FunctionDef]:
        found = {self.callee(call, function) for call in calls_in(function.body)}
        found.discard(None)
        return found  # type: ignore[return-value]


@per_module
def summaries_of(facts: ModuleFacts, kinds: KindTable) -> Summaries:
    """The summaries of the module `kinds` was inferred for: computed once, shared by every
    analysis that reads them (they depend on nothing else)."""
    return Summaries(facts, kinds)


def is_autograd_call(call: cst.Call, facts: ModuleFacts) -> bool:
    """`torch.autograd.grad(...)` / `torch.autograd.backward(...)`."""
    return facts.imports.resolve(call.func) in _AUTOGRAD


def _reads_grad(node: cst.CSTNode) -> bool:
    """`x.grad` read anywhere in `node` (a call of `torch.autograd.grad` is not a read)."""
    called = {id(n.func) for n in walk(node) if type(n) is cst.Call}
    return any(type(n) is cst.Attribute and n.attr.value == "grad" and id(n) not in called
               for n in walk(node))


def _union(summaries: list[Summary]) -> Summary:
    result = Summary()
    for summary in summaries:
        result = result | summary
    return result
