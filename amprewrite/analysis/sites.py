"""Typed facts about the call sites of a training step: each backward pass and what it
backpropagates, each `.step()` and what it steps.

This is the one place that takes such calls apart (`loss.backward()`, `opt.step()`,
`scaler.step(opt)`); analyses and rules read the sites' fields instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import libcst as cst

from amprewrite.analysis.facts import CallSite, ModuleFacts, Statement
from amprewrite.analysis.kinds import RECEIVER_KINDS, Kind, KindTable, kind_from_name
from amprewrite.analysis.memo import per_module
from amprewrite.analysis.model_outputs import holds_model_output
from amprewrite.analysis.names import dotted, iter_keys, receiver_key


class BackwardKind(Enum):
    """What a backward pass is, as far as loss scaling goes."""

    LOSS = "loss"  # `loss.backward()`: scaled
    SEEDED = "seeded"  # `out.backward(grad)` of a model output (WGAN): scaled like a loss
    AUTOGRAD = "autograd"  # `torch.autograd.backward([l1, l2])`: its tensors are scaled
    AUTOGRAD_UNPACKED = "autograd unpacked"  # `torch.autograd.backward(*losses)`
    WITH_ARGUMENT = "with argument"  # `accelerator.backward(loss)`, `out.backward(grad)`
    OBJECT = "object"  # `learner.backward()`: a training object's own method, no tensor's

    @property
    def scalable(self) -> bool:
        return self in _SCALABLE


_SCALABLE = frozenset({BackwardKind.LOSS, BackwardKind.SEEDED, BackwardKind.AUTOGRAD})


@dataclass(frozen=True)
class BackwardSite(CallSite):
    """A backward pass and the tensor it backpropagates."""

    loss: cst.BaseExpression  # the receiver; `torch.autograd.backward`'s tensors
    kind: BackwardKind

    @property
    def method(self) -> bool:
        """`loss.backward()`, not `torch.autograd.backward(loss)`."""
        return self.kind not in (BackwardKind.AUTOGRAD, BackwardKind.AUTOGRAD_UNPACKED)

    def shown(self, facts: ModuleFacts) -> str:
        """The backward as messages quote it: `loss.backward()`,
        `torch.autograd.backward(losses)`."""
        if self.method:
            return f"{facts.one_line(self.loss)}.backward()"
        return f"{facts.one_line(self.call.func)}({facts.one_line(self.loss)})"

    @property
    def key(self) -> str | None:
        """The loss as a name or attribute (`loss`, `self.loss`), if it is one."""
        return receiver_key(self.loss)

    @property
    def keys(self) -> set[str]:
        """Every name the loss expression reads."""
        return set(iter_keys(self.loss))


@dataclass(frozen=True)
class StepSite(CallSite):
    """`x.step(...)`: an optimizer's step, a scheduler's, or another object's (`env.step(a)`).
    Through a scaler (`scaler.step(opt)`), `optimizer` is the argument."""

    optimizer: cst.BaseExpression  # what is stepped
    key: str | None  # `optimizer` as a name or attribute, if it is one
    kind: Kind | None  # what it is, by construction, use or name
    guards: tuple[cst.If, ...]  # the `if` statements around the step, innermost first

    @property
    def with_arguments(self) -> bool:
        """`optimizer.step(closure)` (LBFGS), `env.step(action)`."""
        return bool(self.call.args)

    @property
    def steps_optimizer(self) -> bool:
        return self.kind is Kind.OPTIMIZER


class CallSites:
    """The backward passes and `.step()` calls of a module, in source order."""

    def __init__(self, backwards: list[BackwardSite], steps: list[StepSite]) -> None:
        self.backwards = backwards
        self.steps = steps
        self._by_call: dict[int, BackwardSite | StepSite] = {
            id(site.call): site for site in backwards}
        self._by_call.update((id(site.call), site) for site in steps)

    def at(self, call: cst.Call) -> BackwardSite | StepSite | None:
        """The backward or step site of `call`, if it is one."""
        return self._by_call.get(id(call))


@per_module
def call_sites(facts: ModuleFacts, kinds: KindTable) -> CallSites:
    """Every backward pass (`.backward(...)`, `torch.autograd.backward(...)`) and `.step(...)`
    call of the module, classified."""
    backwards, steps = [], []
    for site in facts.calls:
        func = site.call.func
        if type(func) is cst.Attribute and not _own_method(func, site, facts):
            if func.attr.value == "backward":
                backwards.append(_backward_site(site, func.value, facts, kinds))
            elif func.attr.value == "step":
                steps.append(_step_site(site, func.value, facts, kinds))
        elif type(func) is cst.Name and facts.imports.resolve(func) == _AUTOGRAD_BACKWARD:
            backwards.append(_backward_site(site, func, facts, kinds))  # `backward(loss)`
    return CallSites(backwards, steps)


_AUTOGRAD_BACKWARD = "torch.autograd.backward"


def _own_method(func: cst.Attribute, site: CallSite, facts: ModuleFacts) -> bool:
    """`self.backward(loss)` in a class that defines `backward`: a call of its own method,
    whose body the analysis reads (through the function summaries), not a tensor's."""
    if type(func.value) is not cst.Name or func.value.value != "self" or site.function is None:
        return False
    owner = facts.function_class.get(site.function)
    return owner is not None and facts.method(owner, func.attr.value) is not None


def scaled_step(site: CallSite, facts: ModuleFacts, kinds: KindTable) -> StepSite:
    """`scaler.step(optimizer)`: the step of the optimizer it is given."""
    stepped = site.call.args[0].value if site.call.args else site.call.func
    return _step_site(site, stepped, facts, kinds)


def _step_site(
    site: CallSite, stepped: cst.BaseExpression, facts: ModuleFacts, kinds: KindTable
) -> StepSite:
    key = receiver_key(stepped)
    kind = kinds.of(key) or kind_from_name(key, RECEIVER_KINDS)
    return StepSite(site.call, site.statement, site.small, site.function, stepped, key, kind,
                    guards_of(site.statement, facts))


def guards_of(statement: Statement, facts: ModuleFacts) -> tuple[cst.If, ...]:
    """The `if` statements around `statement` in its function, innermost first."""
    guards = []
    for outer in facts.enclosing_statements(statement)[1:]:
        if type(outer) is cst.FunctionDef:
            break
        if type(outer) is cst.If:
            guards.append(outer)
    return tuple(guards)


def _backward_site(
    site: CallSite, receiver: cst.BaseExpression, facts: ModuleFacts, kinds: KindTable
) -> BackwardSite:
    call = site.call
    positional = any(arg.keyword is None for arg in call.args)
    loss = receiver
    if facts.imports.resolve(call.func) == _AUTOGRAD_BACKWARD:
        tensors = _tensors_argument(call)
        loss = receiver if tensors is None else tensors.value
        kind = BackwardKind.AUTOGRAD_UNPACKED if tensors is None else BackwardKind.AUTOGRAD
    elif _inverse(site, receiver, facts, kinds):
        kind = BackwardKind.OBJECT
    elif positional and not _seeded(site, receiver, facts, kinds):
        kind = BackwardKind.WITH_ARGUMENT
    elif _not_a_tensor(receiver, facts, kinds):
        kind = BackwardKind.OBJECT
    else:
        kind = BackwardKind.SEEDED if positional else BackwardKind.LOSS
    return BackwardSite(call, site.statement, site.small, site.function, loss, kind)


def _tensors_argument(call: cst.Call) -> cst.Arg | None:
    """The `tensors` argument of `torch.autograd.backward(tensors, ...)`: first, or by
    keyword; None when they come unpacked (`*losses`) or not at all."""
    for position, arg in enumerate(call.args):
        if arg.star:
            return None
        if (arg.keyword is None and position == 0) or (
                arg.keyword is not None and arg.keyword.value == "tensors"):
            return arg
    return None


def _seeded(
    site: CallSite, receiver: cst.BaseExpression, facts: ModuleFacts, kinds: KindTable
) -> bool:
    """`errD_real.backward(one)` (WGAN): a backward seeded with a gradient, of a tensor computed
    from a model's output. `scaler.scale(out).backward(seed)` backpropagates `scale * seed`,
    which the scaler unscales at the step, whatever the seed is (`one`, `mone`,
    `torch.FloatTensor([1])`) and wherever it was made."""
    positional = [arg for arg in site.call.args if arg.keyword is None]
    if len(positional) != 1 or positional[0].star:
        return False  # (`retain_graph=True` and the other keywords may follow)
    return holds_model_output(receiver, site.function, facts, kinds)


def _inverse(
    site: CallSite, receiver: cst.BaseExpression, facts: ModuleFacts, kinds: KindTable
) -> bool:
    """`z, log_det = flow.backward(z)`: a method of a model that happens to be named backward
    (a normalizing flow's inverse). A tensor's backward returns None, so a result unpacked
    into names is none of autograd's; nor is the backward of a model whose class, defined
    here, has a `backward` method of its own."""
    small = site.small
    if type(small) is cst.Assign and small.value is site.call and any(
            type(t.target) in (cst.Tuple, cst.List) for t in small.targets):
        return True
    return kinds.of(receiver_key(receiver)) is Kind.MODEL and any(
        facts.method(cls, "backward") is not None for cls in kinds.model_classes())


def _not_a_tensor(receiver: cst.BaseExpression, facts: ModuleFacts, kinds: KindTable) -> bool:
    """`self`, a model or optimizer, or an object every binding builds from a class that is
    not torch's (`learn = Learner(...)`): whatever its `.backward()` does, it is no loss."""
    key = receiver_key(receiver)
    if key is None:
        return False
    if key in ("self", "cls") or kinds.of(key) in (Kind.MODEL, Kind.OPTIMIZER, Kind.SCHEDULER):
        return True
    values = [b.value for b in facts.bindings if b.keys == (key,)]
    return bool(values) and all(_builds_object(value, facts) for value in values)


def _builds_object(value: cst.BaseExpression, facts: ModuleFacts) -> bool:
    """`Learner(...)`: a class the module defines, or one it imports from outside torch (not
    an instance with a capitalised name, `self.BCE_loss(out, y)`)."""
    if not isinstance(value, cst.Call):
        return False
    name = dotted(value.func)
    if name is None or not name.rsplit(".", 1)[-1][:1].isupper():
        return False
    if name in {cls.name.value for cls in facts.classes}:
        return True
    resolved = facts.imports.resolve(value.func)
    return resolved is not None and not resolved.startswith("torch.")
