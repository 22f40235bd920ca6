"""Losses that CUDA autocast refuses (`nn.BCELoss`, `F.binary_cross_entropy`).

They raise inside an autocast region on CUDA, so their statements are cut out of the
autocast regions and computed on float32 inputs. Only the loss leaves: a forward written
inline in its input (`bce(discriminator(fake), valid)`, `bce(model(x), y).backward()`) stays
under autocast, as a statement of its own at the end of the region before the loss.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis.facts import Block, ModuleFacts, Statement, body
from amprewrite.analysis.forward import is_model_call
from amprewrite.analysis.kinds import KindTable
from amprewrite.analysis.names import dotted
from amprewrite.analysis.statements import calls_in, is_compute, is_data_call
from amprewrite.analysis.training_step import Region

_UNSAFE = frozenset({"torch.nn.functional.binary_cross_entropy", "torch.nn.BCELoss"})


@dataclass(frozen=True)
class UnsafeLoss:
    """A statement computing a loss that is unsafe under autocast (float32 inputs needed)."""

    statement: Statement
    calls: tuple[cst.Call, ...]  # the loss calls whose first argument must become float32
    block: Block  # where the statement is, at `index`
    index: int
    # First arguments that run a forward pass: computed under autocast, before the statement.
    forwards: tuple[cst.BaseExpression, ...] = ()


@dataclass
class SplitRegions:
    """Autocast regions with the unsafe loss computations cut out of them."""

    regions: list[Region] = field(default_factory=list)  # what stays under autocast
    moved_out: list[UnsafeLoss] = field(default_factory=list)

    @property
    def autocasts(self) -> bool:
        """Something runs under autocast: a region, or a forward kept in from a loss."""
        return bool(self.regions) or any(loss.forwards for loss in self.moved_out)

    @property
    def forwards(self) -> list[cst.BaseExpression]:
        """Forwards written inside an unsafe loss's input, which run under autocast."""
        return [forward for loss in self.moved_out for forward in loss.forwards]

    @property
    def float32_inputs(self) -> list[cst.BaseExpression]:
        """The loss inputs the rewrite casts to float32."""
        return [call.args[0].value for loss in self.moved_out for call in loss.calls]


def unsafe_calls(
    node: cst.CSTNode, facts: ModuleFacts, kinds: KindTable, helpers: Mapping[str, bool] = {}
) -> list[cst.Call]:
    """The unsafe loss calls in `node`, and the calls of `helpers` (local functions that
    compute one: `loss_function(recon, x, mu, logvar)` in pytorch/examples' VAE)."""
    found = []
    for call in calls_in(node):
        name = facts.imports.resolve(call.func) or kinds.constructors.get(
            dotted(call.func) or "", "")
        if (name in _UNSAFE or _helper_name(call) in helpers) and call.args:
            found.append(call)
    return found


def unsafe_helpers(facts: ModuleFacts, kinds: KindTable) -> dict[str, bool]:
    """The module's functions that compute an unsafe loss, directly or through the functions
    they call, by the name they are called with; True where the loss's input is the function's
    first parameter (so casting the call's first argument makes it float32)."""
    helpers: dict[str, bool] = {}
    grown = True
    while grown:
        grown = False
        for function in facts.functions:
            name = function.name.value
            calls = unsafe_calls(function.body, facts, kinds, helpers)
            if name in helpers or not calls:
                continue
            positional, _ = facts.parameters(function)
            first = positional[0] if positional else None
            helpers[name] = all(dotted(_peel(call.args[0].value)) == first
                                and helpers.get(_helper_name(call) or "", True) for call in calls)
            grown = True
    return helpers


def _helper_name(call: cst.Call) -> str | None:
    name = dotted(call.func)
    return name.removeprefix("self.") if name is not None else None


def _peel(node: cst.BaseExpression) -> cst.BaseExpression:
    """`recon_x.view(-1, 784)` -> `recon_x`."""
    while (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
           and node.func.attr.value in ("view", "reshape", "flatten", "squeeze", "unsqueeze")):
        node = node.func.value
    return node


def split_unsafe_losses(
    regions: list[Region], facts: ModuleFacts, kinds: KindTable, helpers: Mapping[str, bool]
) -> SplitRegions:
    """Cut statements computing an unsafe loss (or calling one of `helpers`, see
    `unsafe_helpers`) out of `regions`."""
    result = SplitRegions()
    for region in regions:
        hoist = region.hoist
        start = region.start
        if hoist is not None and unsafe_calls(hoist.loss, facts, kinds, helpers):
            # `bce(model(x), y).backward()`: the backward stays, its forward joins the region.
            block, index = facts.position(hoist.statement)
            result.moved_out.append(
                _unsafe_loss(hoist.statement, block, index, facts, kinds, helpers))
            rest = Region(region.block, start, region.end)
            if start <= region.end and any(is_compute(s, facts) for s in rest.statements):
                result.regions.append(rest)
            continue
        for index in range(region.start, region.end + 1):
            statement = body(region.block)[index]
            if not unsafe_calls(statement, facts, kinds, helpers):
                continue
            result.moved_out.append(
                _unsafe_loss(statement, region.block, index, facts, kinds, helpers))
            if index > start:
                result.regions.append(Region(region.block, start, index - 1))
            start = index + 1
        rest = Region(region.block, start, region.end, hoist)
        if start == region.start:
            result.regions.append(region)
        elif hoist is not None or any(is_compute(s, facts) for s in rest.statements):
            result.regions.append(rest)
    return result


def _unsafe_loss(
    statement: Statement, block: Block, index: int, facts: ModuleFacts, kinds: KindTable,
    helpers: Mapping[str, bool],
) -> UnsafeLoss:
    calls = tuple(call for call in unsafe_calls(statement, facts, kinds, helpers)
                  if helpers.get(_helper_name(call) or "", True))  # those whose input is cast
    forwards = tuple(call.args[0].value for call in calls
                     if runs_forward(call.args[0].value, facts, kinds))
    return UnsafeLoss(statement, calls, block, index, forwards)


def runs_forward(node: cst.CSTNode, facts: ModuleFacts, kinds: KindTable) -> bool:
    """`discriminator(fake)`, `self.net(x).view(-1)`: a model (or something called like one,
    not a torch function nor a criterion) runs inside `node`."""
    for call in calls_in(node):
        if is_model_call(call, kinds):
            return True
        if (facts.imports.resolve(call.func) is None and dotted(call.func) is not None
                and not is_data_call(call, facts) and kinds.of_expr(call.func) is None):
            return True
    return False
