"""Autocast regions placed by what the functions they call do (see `summaries.py`).

The training regions are backward slices from each loss; three kinds of calls need more:

* a call of a function that runs its own backward or `torch.autograd.grad` (an FGSM/PGD
  attack, a gradient penalty, a MAML inner loop) never runs under autocast: the region is cut
  around its statement, and low-precision values the region computed are cast to float32
  where they are passed to it;
* a forward-and-loss helper that training shares with other callers (evaluation, a generator
  expression, a lambda) gets one region inside, around its forward pass and loss, and its
  callers' statements are left out of the regions;
* a loss computed only from values another function stored (`policy.saved_log_probs`, filled
  by `select_action`) gets its region where that function runs the model, not around the
  reward arithmetic before the loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis.facts import Block, ModuleFacts, Statement
from amprewrite.analysis.forward import computes
from amprewrite.analysis.kinds import KindTable
from amprewrite.analysis.names import bound_keys, iter_keys, walk
from amprewrite.analysis.sites import BackwardSite
from amprewrite.analysis.statements import calls_in
from amprewrite.analysis.stored_steps import stored_chain
from amprewrite.analysis.summaries import Summaries, is_autograd_call, summaries_of
from amprewrite.analysis.training_step import Note, Region, TrainingSteps, region_before
from amprewrite.catalog import SKIP, declare

OWN_BACKWARD_KEPT_OUT = declare(
    "AMP220", SKIP, "function running its own backward kept out of autocast",
    "An attack (FGSM/PGD), gradient penalty or meta-learning inner loop calls `.backward()` or "
    "`torch.autograd.grad` itself: the region is cut around the call, which runs in float32 with "
    "unscaled gradients.",
    why=(
        "A function that runs its own `.backward()` or `torch.autograd.grad` (an "
        "attack, a gradient penalty) is called from the training step."
    ),
    example=(
        "def fgsm(model, x, y):\n"
        "    loss = criterion(model(x), y)\n"
        "    loss.backward()\n"
        "    return x + eps * x.grad.sign()"
    ),
)

_NESTED_BLOCKS = (cst.For, cst.While, cst.With, cst.If)


@dataclass
class FunctionRegions:
    """Training regions once the functions they call are taken into account."""

    regions: list[Region] = field(default_factory=list)
    helpers: list[Region] = field(default_factory=list)  # inside shared forward helpers
    producers: list[Region] = field(default_factory=list)  # where stored outputs are computed
    casts: list[cst.BaseExpression] = field(default_factory=list)  # arguments to `.float()`
    notes: list[Note] = field(default_factory=list)  # calls kept out of autocast
    # backward calls whose loss is computed elsewhere and autocast where it is (by id)
    produced: set[int] = field(default_factory=set)

    @property
    def all_regions(self) -> list[Region]:
        return [*self.regions, *self.helpers, *self.producers]


def place_regions(
    training: TrainingSteps, facts: ModuleFacts, kinds: KindTable
) -> FunctionRegions:
    result = FunctionRegions()
    if not training.backwards:
        return result
    summaries = summaries_of(facts, kinds)
    helpers = _shared_helpers(training.regions, facts, kinds, summaries)
    result.helpers = list(helpers.values())
    placer = _Cutter(facts, kinds, summaries, set(helpers), result)
    regions = [piece for region in training.regions for piece in placer.cut(region)]
    result.regions = _move_to_producers(regions, training, facts, kinds, summaries, result)
    return result


# Shared forward helpers ---------------------------------------------------------------------
def _shared_helpers(
    regions: list[Region], facts: ModuleFacts, kinds: KindTable, summaries: Summaries
) -> dict[cst.FunctionDef, Region]:
    """Forward-and-loss helpers called from a training region and from elsewhere, each with
    the region inside it."""
    covered = {id(s) for region in regions for s in region.statements}
    inside: dict[cst.FunctionDef, bool] = {}
    outside: dict[cst.FunctionDef, bool] = {}
    for site, callee in summaries.local_calls:
        in_region = any(id(s) in covered for s in facts.enclosing_statements(site.statement))
        (inside if in_region else outside)[callee] = True
    helpers = {}
    for function in inside.keys() & outside.keys():
        summary = summaries.functions[function]
        if summary.forward and not (summary.backward or summary.steps):
            region = _helper_region(function, facts, kinds, summaries)
            if region is not None:
                helpers[function] = region
    return helpers


def _helper_region(
    function: cst.FunctionDef, facts: ModuleFacts, kinds: KindTable, summaries: Summaries
) -> Region | None:
    """From the forward pass to the final `return` of a helper (`return crit(out, y)`)."""
    body = function.body
    if not isinstance(body, cst.IndentedBlock) or not body.body:
        return None
    last = body.body[-1]
    if not (isinstance(last, cst.SimpleStatementLine) and len(last.body) == 1
            and isinstance(last.body[0], cst.Return) and last.body[0].value is not None):
        return None
    returned = last.body[0].value
    if any(isinstance(node, cst.Return) for s in body.body[:-1] for node in walk(s)):
        return None  # early returns would leave the region
    region = region_before(last, set(iter_keys(returned)), facts, kinds)
    computes_here = summaries.of_node(returned, function)
    end = len(body.body) - 1 if computes_here.forward or computes_here.loss else None
    if region is None or region.block is not body:
        return None if end is None else Region(body, end, end)
    return Region(body, region.start, region.end if end is None else end)


# Cutting regions around calls --------------------------------------------------------------
class _Cutter:
    """Splits regions around statements that must not run under autocast."""

    def __init__(
        self,
        facts: ModuleFacts,
        kinds: KindTable,
        summaries: Summaries,
        helpers: set[cst.FunctionDef],
        result: FunctionRegions,
    ) -> None:
        self.facts, self.kinds, self.summaries = facts, kinds, summaries
        self.helpers, self.result = helpers, result

    def cut(self, region: Region) -> list[Region]:
        if not any(self._excluded(s) for s in region.statements):
            return [region]
        low: set[str] = set()  # keys the region binds to low-precision values
        return self._pieces(region.block, region.start, region.end, region, low)

    def _pieces(
        self, block: Block, start: int, end: int, region: Region, low: set[str]
    ) -> list[Region]:
        pieces: list[Region] = []
        run_start = start
        excluded = self._excluded_between(block, start, end)
        for index in range(start, end + 1):
            statement = block.body[index]
            if index not in excluded:
                self._track_low(statement, low)
                continue
            pieces.extend(self._kept(block, run_start, index - 1, None))
            run_start = index + 1
            if isinstance(statement, _NESTED_BLOCKS) and self._forward(statement):
                for inner in _inner_blocks(statement):
                    pieces.extend(self._pieces(inner, 0, len(inner.body) - 1, region, low))
            else:
                self._leave_out(statement, low)
        hoist = region.hoist if block is region.block and end == region.end else None
        pieces.extend(self._kept(block, run_start, end, hoist))
        return pieces

    def _excluded_between(self, block: Block, start: int, end: int) -> set[int]:
        """Positions left out of the region; an inline `torch.autograd.grad` takes what it
        differentiates with it (its graph must be float32 like its unscaled gradients)."""
        excluded = {i for i in range(start, end + 1) if self._excluded(block.body[i])}
        for index in sorted(excluded, reverse=True):
            statement = block.body[index]
            if not any(is_autograd_call(c, self.facts) for c in calls_in(statement)):
                continue
            needed = set(iter_keys(statement))
            for earlier in range(index - 1, start - 1, -1):
                if bound_keys(block.body[earlier]) & needed:
                    excluded.add(earlier)
                    needed |= set(iter_keys(block.body[earlier]))
        return excluded

    def _excluded(self, statement: Statement) -> bool:
        """Runs a backward, or gets its forward from a helper with its own region."""
        function = self.facts.statements[statement].function
        if self.summaries.of_node(statement, function).backward:
            return True
        calls = calls_in(statement)
        if not any(self.summaries.callee(c, function) in self.helpers for c in calls):
            return False
        rest = [self.summaries.of_call(c, function) for c in calls
                if self.summaries.callee(c, function) not in self.helpers]
        return not any(s.forward or s.loss for s in rest) or isinstance(statement, _NESTED_BLOCKS)

    def _forward(self, statement: Statement) -> bool:
        function = self.facts.statements[statement].function
        summary = self.summaries.of_node(statement, function)
        return summary.forward or summary.loss

    def _kept(
        self, block: Block, start: int, end: int, hoist: BackwardSite | None
    ) -> list[Region]:
        """The run `start`..`end` as a region, trimmed to its forward pass, if it has one."""
        while start <= end and not computes(block.body[start], self.facts, self.kinds):
            start += 1
        while hoist is None and end >= start and not self._forward(block.body[end]) \
                and not computes(block.body[end], self.facts, self.kinds):
            end -= 1
        if hoist is not None:
            return [Region(block, start, end, hoist)]
        if start > end or not any(self._forward(s) for s in block.body[start : end + 1]):
            return []
        return [Region(block, start, end)]

    def _track_low(self, statement: Statement, low: set[str]) -> None:
        function = self.facts.statements[statement].function
        if self.summaries.of_node(statement, function).forward or set(iter_keys(statement)) & low:
            low |= bound_keys(statement)

    def _leave_out(self, statement: Statement, low: set[str]) -> None:
        """Report the backward-running calls left out; cast low-precision values passed in."""
        function = self.facts.statements[statement].function
        for call in calls_in(statement):
            summary = self.summaries.of_call(call, function)
            if summary.backward:
                name = self.facts.module.code_for_node(call.func)
                local = self.summaries.callee(call, function) is not None
                self.result.notes.append(Note(
                    OWN_BACKWARD_KEPT_OUT, call,
                    f"`{name}(...)` runs its own backward pass: kept out of autocast, it runs in "
                    "float32" if local else f"`{name}(...)` runs a "
                    "backward pass: kept out of autocast, its gradients are not loss-scaled"))
            if (summary.backward or summary.forward) and not is_autograd_call(call, self.facts):
                callee = self.summaries.callee(call, function)
                kept = _differentiated(callee, self.facts) if callee is not None else set()
                for arg, parameter in _bound_arguments(call, callee, self.facts):
                    if set(iter_keys(arg.value)) & low and parameter not in kept:
                        self.result.casts.append(arg.value)


def _bound_arguments(
    call: cst.Call, callee: cst.FunctionDef | None, facts: ModuleFacts
) -> list[tuple[cst.Arg, str | None]]:
    """Each argument of `call` with the parameter of `callee` it binds (None: unknown)."""
    positional = facts.parameters(callee)[0] if callee is not None else []
    bound: list[tuple[cst.Arg, str | None]] = []
    for index, arg in enumerate(call.args):
        if arg.star:  # `*args`: what the later positional arguments bind is unknown
            positional = []
        if arg.keyword is not None:
            bound.append((arg, arg.keyword.value))
        else:
            bound.append((arg, positional[index] if index < len(positional) else None))
    return bound


def _differentiated(function: cst.FunctionDef, facts: ModuleFacts) -> set[str]:
    """The names `function` differentiates with respect to (`torch.autograd.grad(outputs=out,
    inputs=x)`, `.backward(inputs=x)`): a `.float()` copy of such an argument would not be in
    the graph its outputs were computed in (`appears to not have been used in the graph`)."""
    names: set[str] = set()
    for node in walk(function.body):
        if type(node) is not cst.Call:
            continue
        inputs = next((a.value for a in node.args if a.keyword is not None
                       and a.keyword.value == "inputs"), None)
        if inputs is None and facts.imports.resolve(node.func) == "torch.autograd.grad":
            positional = [a for a in node.args if a.keyword is None and not a.star]
            inputs = positional[1].value if len(positional) > 1 else None
        if inputs is not None:
            names |= {key.split(".", 1)[0] for key in iter_keys(inputs)}
    return names


def _inner_blocks(statement: Statement) -> list[cst.IndentedBlock]:
    blocks = []
    current: cst.CSTNode | None = statement
    while isinstance(current, _NESTED_BLOCKS):
        if isinstance(current.body, cst.IndentedBlock):
            blocks.append(current.body)
        orelse = getattr(current, "orelse", None)
        current = orelse if isinstance(orelse, cst.If) else getattr(orelse, "body", None)
        if isinstance(current, cst.IndentedBlock):
            blocks.append(current)
            break
    return blocks


# Regions moved to where stored outputs are computed -----------------------------------------
def _move_to_producers(
    regions: list[Region],
    training: TrainingSteps,
    facts: ModuleFacts,
    kinds: KindTable,
    summaries: Summaries,
    result: FunctionRegions,
) -> list[Region]:
    """For each loss whose slice runs no forward pass, the regions in functions that run the
    model and store what the loss reads (`policy.saved_log_probs.append(m.log_prob(a))`)."""
    kept = list(regions)
    for site in training.backwards:
        needed = site.keys
        region = region_before(site.statement, needed, facts, kinds)
        if region is not None and any(summaries.of_node(s, site.function).forward
                                      for s in region.statements):
            continue
        producers = _producers(site.function, needed, facts, kinds, summaries, result) or (
            stored_chain(site.function, site.statement, needed, facts, kinds, summaries))
        if not producers:
            continue
        result.producers.extend(producers)
        result.produced.add(id(site.call))
        if region is not None:
            kept = [r for r in kept if r.block is not region.block] + [
                r for r in (_from_first_loss(r, summaries) for r in kept
                            if r.block is region.block) if r is not None]
    return kept


def _producers(
    consumer: cst.FunctionDef | None,
    needed: set[str],
    facts: ModuleFacts,
    kinds: KindTable,
    summaries: Summaries,
    result: FunctionRegions,
) -> list[Region]:
    stored = {key for key in needed if "." in key}
    owner = facts.function_class.get(consumer) if consumer is not None else None
    regions = []
    for statement, info in facts.statements.items():
        function = info.function
        if function is None or function is consumer or not isinstance(
                statement, cst.SimpleStatementLine):
            continue
        keys = bound_keys(statement) & stored
        if not keys or not summaries.of_node_direct(function.body, function).forward:
            continue
        if any(k.startswith("self.") for k in keys) and facts.function_class.get(
                function) is not owner:
            continue
        region = _forward_part(statement, facts, kinds, summaries)
        if region is not None:
            regions.append(region)
            result.casts.extend(_distribution_inputs(region, statement, facts))
    return regions


def _forward_part(
    statement: Statement, facts: ModuleFacts, kinds: KindTable, summaries: Summaries
) -> Region | None:
    """The model calls among the statements computing what `statement` stores."""
    function = facts.statements[statement].function
    block, index = facts.position(statement)
    if summaries.of_node_direct(statement, function).forward:
        return Region(block, index, index)
    region = region_before(statement, set(iter_keys(statement)), facts, kinds)
    if region is None:
        return None
    forwards = [i for i in range(region.start, region.end + 1)
                if summaries.of_node_direct(region.block.body[i], function).forward]
    return Region(region.block, min(forwards), max(forwards)) if forwards else None


def _distribution_inputs(
    region: Region, statement: Statement, facts: ModuleFacts
) -> list[cst.BaseExpression]:
    """Region outputs passed to a `torch.distributions` constructor up to `statement`: its
    argument checks (a simplex within 1e-6) fail on low-precision probabilities."""
    low = {key for s in region.statements for key in bound_keys(s)}
    _, last = facts.position(statement)
    found = []
    for later in region.block.body[region.end + 1 : last + 1]:
        for call in calls_in(later):
            name = facts.imports.resolve(call.func) or ""
            if name.startswith("torch.distributions."):
                found.extend(arg.value for arg in call.args if set(iter_keys(arg.value)) & low)
    return found


def _from_first_loss(region: Region, summaries: Summaries) -> Region | None:
    """The region from its first loss computation on (reward arithmetic before it stays
    out), or None when it computes no loss."""
    for index in range(region.start, region.end + 1):
        statement = region.block.body[index]
        function = summaries.facts.statements[statement].function
        if summaries.of_node(statement, function).loss:
            return Region(region.block, index, region.end, region.hoist)
    return None
