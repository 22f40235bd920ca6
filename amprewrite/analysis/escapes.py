"""Low-precision values that leave an autocast region, and the uses that would crash on them.

A tensor computed under autocast (a model's output, a matmul, anything derived from one) is
bfloat16/float16. After the region it reaches code that wants float32: `.numpy()` and numpy
functions (numpy has no bfloat16), float32 models and matmuls (`Input type (c10::BFloat16)
and weight type (float) should be the same`), losses mixing it with float32 tensors, and
index-puts into float32 buffers. Values are followed by key through each function in source
order, through containers (`outputs.append(out)`), loops and comprehensions over them, and
the returns of the module's functions. Model methods (and helpers called from a region) run
under their caller's autocast: a `.numpy()` inside them counts too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis.dtype import views
from amprewrite.analysis.dtype.ops import ARRAY_LIBRARIES, NOT_TENSOR_ATTRIBUTES
from amprewrite.analysis.facts import ModuleFacts, Statement
from amprewrite.analysis.forward import is_loss_call, is_model_call
from amprewrite.analysis.kinds import KindTable
from amprewrite.analysis.names import dotted, duplicable, receiver_key, target_keys
from amprewrite.analysis.training_step import Region
from amprewrite.analysis.tree import children, descendants
from amprewrite.analysis.unsafe_losses import unsafe_calls

# Why a value assigned to a parameter's `.data` takes its dtype.
DATA_REPLACED = "an assignment to `.data`, which would change its dtype"


def _in_array_library(resolved: str) -> bool:
    return any(resolved == lib or resolved.startswith(lib + ".") for lib in ARRAY_LIBRARIES)


@dataclass(frozen=True)
class Escape:
    """A low-precision expression used where float32 is needed: cast it with `.float()`."""

    node: cst.BaseExpression  # what to cast
    statement: Statement  # where the use is
    use: str  # e.g. "`.numpy()`", "the float32 model `netD`"
    floating: bool = True  # False: it may be an integer tensor, which a cast must not touch
    # an in-place op's tensor whose dtype the value must take (`t.index_add_(0, i, v)` needs
    # one dtype): `v.to(t.dtype)`, since the tensor itself cannot be cast in place
    like: cst.BaseExpression | None = None


@dataclass(frozen=True)
class Stuck:
    """A low-precision value reaching a float32 use that no cast at one place can fix."""

    node: cst.CSTNode
    statement: Statement
    what: str


@dataclass
class Escapes:
    """Every escaping use of a low-precision value found in a module."""

    casts: list[Escape] = field(default_factory=list)
    stuck: list[Stuck] = field(default_factory=list)


def find_escapes(
    facts: ModuleFacts,
    kinds: KindTable,
    regions: Iterable[Region],
    float32_already: Iterable[cst.CSTNode] = (),
    autocast_expressions: Iterable[cst.CSTNode] = (),
) -> Escapes:
    """The uses of values computed under `regions` (and `autocast_expressions`) that crash
    outside them, and `.numpy()` calls reached under autocast; nodes another rule already
    makes float32 are skipped."""
    in_region: set[int] = set()
    for region in regions:
        in_region.update(id(s) for s in region.statements)
        if region.hoist is not None:  # `crit(out, y).backward()`: the loss moves into it
            in_region.add(id(region.hoist.loss))
    in_region.update(id(node) for node in autocast_expressions)
    scopes = _Scopes(facts, kinds, in_region, {id(n) for n in float32_already})
    scopes.run(record=False)  # function summaries: which return low-precision values
    scopes.run(record=True)
    return scopes.result


class _Scopes:
    def __init__(
        self, facts: ModuleFacts, kinds: KindTable, in_region: set[int], skip: set[int]
    ) -> None:
        self.facts, self.kinds, self.in_region, self.skip = facts, kinds, in_region, skip
        self.returns: dict[str, tuple[bool, ...]] = {}  # function name -> low per element
        self.held: dict[str, tuple[bool, ...]] = {}  # function name -> container per element
        self.samples: dict[str, tuple[bool, ...]] = {}  # function name -> maybe integer, each
        self.result = Escapes()
        self.record = False
        self.models = _model_classes(facts, kinds)
        self.under_caller = _run_under_caller(facts, self.models, in_region)
        self.by_name: dict[str, list[cst.FunctionDef]] = {}
        for function in facts.functions:
            self.by_name.setdefault(function.name.value, []).append(function)
        # (callee name, autocast, the forward a parameter is bound to) -> parameter uses
        self.parameter_uses: dict[
            tuple[str, bool, cst.FunctionDef | None], dict[int | str, list[Escape]]] = {}
        # (function, low parameters, autocast) -> which returned values are low
        self.given: dict[tuple[cst.FunctionDef, frozenset[str], bool], tuple[bool, ...]] = {}
        self.model_forwards = _model_forwards(facts)  # `model` -> Net.forward for `Net()`
        self.passed_forwards = _passed_forwards(facts, self.by_name, self.model_forwards)
        self.forward_returns: dict[cst.FunctionDef, tuple[bool, ...]] = {}
        self.forward_held: dict[cst.FunctionDef, tuple[bool, ...]] = {}
        self.forward_samples: dict[cst.FunctionDef, tuple[bool, ...]] = {}
        self.array_objects = {  # `writer = SummaryWriter(...)`, `run = wandb.init(...)`
            key for b in facts.bindings if type(b.value) is cst.Call
            and _in_array_library(facts.imports.resolve(b.value.func) or "") for key in b.keys
        }

    def run(self, record: bool) -> None:
        self.record = record
        self.result = Escapes()
        self.parameter_uses.clear()  # recomputed with this pass's return summaries
        self.given.clear()
        _Scope(self, autocast=False).block(self.facts.module.body)
        for function in self.facts.functions:
            scope = _Scope(self, autocast=function in self.under_caller, function=function)
            scope.block(function.body.body)
            if not record:
                self.returns[function.name.value] = scope.returned
                self.held[function.name.value] = scope.returned_containers
                self.samples[function.name.value] = scope.returned_samples
                if function.name.value == "forward":
                    self.forward_returns[function] = scope.returned
                    self.forward_held[function] = scope.returned_containers
                    self.forward_samples[function] = scope.returned_samples

    def float32_parameters(
        self, call: cst.Call, autocast: bool, caller: cst.FunctionDef | None
    ) -> dict[int | str, list[Escape]]:
        """The parameters of the module function `call` reaches (by position, and by name)
        whose value reaches a float32 use inside it, each with those uses."""
        name = (dotted(call.func) or "").removeprefix("self.")
        passed = self.passed_forwards.get((caller, name)) if caller is not None else None
        callees = [passed] if passed is not None else self._callees(name)
        key = (name, autocast, passed)
        if key not in self.parameter_uses:
            self.parameter_uses[key] = {}  # a recursive call sees none
            uses: dict[int | str, list[Escape]] = {}
            for function in callees:
                uses.update(self._parameter_uses(function, name, autocast))
            self.parameter_uses[key] = uses
        return self.parameter_uses[key]

    def _callees(self, name: str) -> list[cst.FunctionDef]:
        """The module's functions `name` may call: `helper`, `self.helper`, or the methods
        of the module's classes named like the attribute of `meter.update`."""
        if "." not in name:
            return self.by_name.get(name, [])
        method = name.rsplit(".", 1)[1]
        return [f for f in self.by_name.get(method, []) if f in self.facts.function_class]

    def _parameter_uses(
        self, function: cst.FunctionDef, name: str, autocast: bool
    ) -> dict[int | str, list[Escape]]:
        """Each parameter whose value makes a float32 use inside `function` low precision;
        a use that is low whatever the arguments (a layer's output under autocast) is the
        function's own, cast where it is, not the callers'."""
        autocast = autocast or function in self.under_caller
        positional, keyword_only = self.facts.parameters(function)
        own: set[int] | None = None  # computed once, when a parameter reaches any use
        uses: dict[int | str, list[Escape]] = {}
        for position, param in [*enumerate(positional), *((None, p) for p in keyword_only)]:
            reached = self._probe(function, {param}, autocast)
            if reached and own is None:
                own = {id(escape.node) for escape in self._probe(function, set(), autocast)}
            found = [Escape(e.node, e.statement, f"{e.use} in `{name}()`")
                     for e in reached if own is not None and id(e.node) not in own]
            if found:
                uses[param] = found
                if position is not None:
                    uses[position] = found
        return uses

    def returns_given(
        self, function: cst.FunctionDef, low: frozenset[str], autocast: bool
    ) -> tuple[bool, ...]:
        """Which values `function` returns are low precision when parameters `low` are."""
        key = (function, low, autocast or function in self.under_caller)
        if key not in self.given:
            self.given[key] = ()  # a recursive call sees nothing low
            self.given[key] = self._probed(function, low, key[2]).returned
        return self.given[key]

    def _probe(self, function: cst.FunctionDef, low: set[str], autocast: bool) -> list[Escape]:
        """The float32 uses inside `function` that low-precision `low` reach."""
        probed = self._probed(function, low, autocast).probe
        assert probed is not None
        return probed

    def _probed(
        self, function: cst.FunctionDef, low: Iterable[str], autocast: bool
    ) -> _Scope:
        """`function`'s body followed with `low` low precision, recording nothing."""
        probe = _Scope(self, autocast=autocast, function=function)
        probe.low, probe.probe = set(low), []
        probe.block(function.body.body)
        return probe


def _arguments_for(
    call: cst.Call, parameters: dict[int | str, list[Escape]]
) -> Iterable[tuple[cst.Arg, list[Escape]]]:
    """The arguments of `call` bound to `parameters`, with the use of each."""
    position = 0
    for arg in call.args:
        if arg.star:
            continue
        if arg.keyword is not None:
            use = parameters.get(arg.keyword.value)
        else:
            use = parameters.get(position)
            position += 1
        if use is not None:
            yield arg, use


class _Scope:
    """Follows low-precision keys through one function body, in source order."""

    def __init__(
        self, scopes: _Scopes, autocast: bool, function: cst.FunctionDef | None = None
    ) -> None:
        self.s = scopes
        self.function = function  # the function whose body this scope follows
        self.base_autocast = autocast
        self.low: set[str] = set()
        self.containers: set[str] = set()
        self.appended: dict[str, list[cst.BaseExpression]] = {}
        self.returned: tuple[bool, ...] = ()
        self.autocast = autocast
        self.statement: Statement | None = None
        self.probe: list[Escape] | None = None  # set: only collect the uses a value reaches
        self.returned_containers: tuple[bool, ...] = ()  # which returned values are containers
        self.returned_samples: tuple[bool, ...] = ()  # which returned values may be integers
        self.layers: set[str] = set()  # loop variables over a model's submodules
        self.counters: set[str] = set()  # loop variables counting (`for i in range(n)`)
        self.maybe_integer: set[str] = set()  # keys that may hold an integer tensor (samples)

    # Statements ---------------------------------------------------------------------------
    def block(self, body: Iterable[cst.CSTNode]) -> None:
        for statement in body:
            self.compound_or_line(statement)

    def compound_or_line(self, statement: cst.CSTNode) -> None:
        if isinstance(statement, cst.FunctionDef | cst.ClassDef):
            return
        outer_autocast, outer_statement = self.autocast, self.statement
        if id(statement) in self.s.in_region:
            self.autocast = True
        if isinstance(statement, cst.SimpleStatementLine | cst.BaseCompoundStatement):
            self.statement = statement
        if type(statement) is cst.SimpleStatementLine:
            for small in statement.body:
                self.small(small)
        elif type(statement) is cst.For:
            self.check(statement.iter)
            self.bind_iteration(statement.target, statement.iter)
            self.layers.update(_submodules_iterated(statement))
            self.counters.update(_counters(statement))
            self.block(statement.body.body)
            self.suite(statement.orelse)
        elif isinstance(statement, cst.If | cst.While):
            self.check(statement.test)
            self.block(statement.body.body)
            self.suite(statement.orelse)
        elif type(statement) is cst.With:
            for item in statement.items:
                self.check(item.item)
            self.block(statement.body.body)
        elif type(statement) is cst.Try:
            self.block(statement.body.body)
            for handler in statement.handlers:
                self.block(handler.body.body)
            self.suite(statement.orelse)
            self.suite(statement.finalbody)
        self.autocast, self.statement = outer_autocast, outer_statement

    def suite(self, node: cst.CSTNode | None) -> None:
        if type(node) is cst.If:
            self.compound_or_line(node)
        elif node is not None:
            body = getattr(node, "body", None)
            if type(body) is cst.IndentedBlock:
                self.block(body.body)

    def small(self, small: cst.BaseSmallStatement) -> None:
        if type(small) is cst.Assign:
            self.check(small.value)
            for target in small.targets:
                self.check_store(target.target, small.value)
                self.bind(target.target, self.is_low(small.value), small.value)
        elif type(small) is cst.AnnAssign and small.value is not None:
            self.check(small.value)
            self.bind(small.target, self.is_low(small.value), small.value)
        elif type(small) is cst.AugAssign:
            self.check(small.value)
        elif type(small) is cst.Return and small.value is not None:
            self.check(small.value)
            value = small.value
            elements = ([e.value for e in value.elements] if type(value) is cst.Tuple
                        else [value])
            flags = tuple(self.is_low(e) for e in elements)
            held = tuple(receiver_key(e) in self.containers for e in elements)
            samples = tuple(self.may_be_integer(e) for e in elements)
            if len(flags) == len(self.returned):  # several returns: low where any is
                flags = tuple(a or b for a, b in zip(flags, self.returned, strict=True))
                held = tuple(a or b for a, b in zip(held, self.returned_containers, strict=True))
                samples = tuple(a or b for a, b in zip(samples, self.returned_samples,
                                                       strict=True))
            self.returned, self.returned_containers = flags, held
            self.returned_samples = samples
        elif type(small) is cst.Expr:
            self.check(small.value)
            self.track_append(small.value)

    def bind_iteration(self, target: cst.BaseExpression, iterated: cst.BaseExpression) -> None:
        """Bind a loop's target: element by element through `zip(a, b)` and `enumerate(a)`
        (a path zipped with a tensor stays a path), else as low as what is iterated."""
        parts = _iterated_parts(target, iterated)
        if parts is None:
            self.bind(target, self.is_low(iterated))
            return
        for element, part in parts:
            if part is None:
                self.bind(element, False)  # enumerate's counter
            else:
                self.bind_iteration(element, part)

    def bind(
        self, target: cst.BaseExpression, low: bool, value: cst.BaseExpression | None = None,
        integer: bool = False,
    ) -> None:
        """`target` now holds `value` (low precision or not); `integer`: it may hold an integer
        tensor (a sample), whatever `value` shows."""
        if isinstance(target, cst.Tuple | cst.List):
            parts = _elements(value) if value is not None else None
            unpacks_indices = type(value) is cst.Call and views.values_and_indices(_method(value))
            for position, element in enumerate(target.elements):
                part = parts[position] if parts and len(parts) == len(target.elements) else None
                element_low = self.is_low(part) if part is not None else (
                    low and not (unpacks_indices and position == 1))
                held = False
                # The dtype of an element no expression shows (`action, logp = agent.act(x)`)
                # is unknown: it may be a sample, whose cast must leave integers alone.
                integer = self.may_be_integer(part) if part is not None else element_low
                if part is None and type(value) is cst.Call:
                    summary = self.summary(value)
                    if summary is not None and len(summary) == len(target.elements):
                        element_low = summary[position]
                        returned = self.held(value)
                        held = len(returned) == len(summary) and returned[position]
                        samples = self.samples_of(value)
                        integer = len(samples) == len(summary) and samples[position]
                self.bind(element.value, element_low, integer=integer)
                if held and element_low:
                    self.hold(element.value)
            return
        if type(target) is cst.Subscript:
            key = receiver_key(target.value)
            if key is not None and low and not self.is_buffer(target):
                self.low.add(key)
                self.containers.add(key)
            return
        integer = low and (integer or (value is not None and self.may_be_integer(value)))
        for key in target_keys(target):
            if low:
                self.low.add(key)
            else:
                self.low.discard(key)
            if integer:
                self.maybe_integer.add(key)
            else:
                self.maybe_integer.discard(key)
            if isinstance(value, cst.List | cst.ListComp | cst.Dict | cst.Tuple):
                self.containers.add(key)
                self.appended.setdefault(key, [])
            else:
                self.containers.discard(key)
        if low and type(value) is cst.Call and self.held(value) == (True,):
            self.hold(target)

    def hold(self, target: cst.BaseExpression) -> None:
        """`target` holds a container of tensors filled elsewhere (no cast reaches them)."""
        for key in target_keys(target):
            self.containers.add(key)
            self.appended.pop(key, None)

    def track_append(self, value: cst.BaseExpression) -> None:
        """`outputs.append(out)`: `outputs` now holds a low-precision tensor."""
        if not (type(value) is cst.Call and type(value.func) is cst.Attribute
                and value.func.attr.value in ("append", "extend") and value.args):
            return
        key = receiver_key(value.func.value)
        arg = value.args[0].value
        if key is None or not self.is_low(arg):
            return
        self.low.add(key)
        self.containers.add(key)
        if value.func.attr.value == "append" and key in self.appended:
            self.appended[key].append(arg)
        else:
            self.appended.pop(key, None)  # filled in a way one cast cannot reach

    # Uses ---------------------------------------------------------------------------------
    def check(self, node: cst.CSTNode) -> None:
        """Record every use inside `node` that needs float32 (comprehensions see their
        targets)."""
        if type(node) in _NOTHING_TO_CHECK:
            return
        if id(node) in self.s.in_region and not self.autocast:  # a forward kept under autocast
            self.autocast = True
            self.check(node)
            self.autocast = False
            return
        if isinstance(node, cst.ListComp | cst.SetComp | cst.GeneratorExp | cst.DictComp):
            saved = set(self.low)
            clause: cst.CompFor | None = node.for_in
            while clause is not None:
                self.check(clause.iter)
                self.bind_iteration(clause.target, clause.iter)
                clause = clause.inner_for_in
            for part in ("elt", "key", "value"):
                child = getattr(node, part, None)
                if child is not None:
                    self.check(child)
            self.low = saved
            return
        if type(node) is cst.Call:
            if self.probe is not None or self.s.record:  # else it would find nothing to keep
                self.check_call(node)
        elif (type(node) is cst.BinaryOperation and not self.autocast
              and type(node.operator) is cst.MatrixMultiply):
            for operand in (node.left, node.right):
                self.cast_if_low(operand, "a float32 matmul (`@`)")
        for child in children(node):
            self.check(child)

    def check_call(self, call: cst.Call) -> None:
        func = call.func
        if type(func) is cst.Attribute:
            position = views.receiver_dtype_source(func.attr.value)
            if position is not None:
                self.match_source(call, func, position)
        if type(func) is cst.Attribute and func.attr.value == "numpy" and not call.args:
            self.cast_if_low(func.value, "`.numpy()` (numpy has no bfloat16)")
            return
        resolved = self.s.facts.imports.resolve(func) or ""
        module, _, last = resolved.rpartition(".")
        if _in_array_library(resolved) or (
            type(func) is cst.Attribute and receiver_key(func.value) in self.s.array_objects
        ):
            for arg in call.args:
                self.cast_if_low(arg.value, f"`{dotted(func)}` (numpy has no bfloat16)")
            return
        needs = self.s.float32_parameters(call, self.autocast, self.function)
        if needs:
            for arg, uses in _arguments_for(call, needs):
                if self.is_low(arg.value) and (self.autocast or self.is_container(arg.value)):
                    # Under autocast the callee's layers would make a cast argument low again;
                    # `.float()` fits the tensors, not a list: cast where they are used
                    for escape in uses:
                        self.add(escape.node, escape.use, escape.statement)
                else:
                    self.cast_if_low(arg.value, uses[0].use)
            return
        if self.autocast:
            if views.may_mix_under_autocast(module, last):
                self.unify(call)
            return  # under autocast, models and matmuls take any float dtype
        kinds = self.s.kinds
        if is_model_call(call, kinds):
            use = f"the float32 model `{dotted(func)}`"
        elif views.runs_low_one_dtype(module, last):
            use = f"`{dotted(func)}` with float32 weights"
        elif is_loss_call(call, self.s.facts, kinds):
            use = f"the loss `{dotted(func) or 'call'}` with float32 inputs"
            if not unsafe_calls(call, self.s.facts, kinds):
                # Only the prediction: the other arguments are targets, often integer labels
                # (`.float()` breaks cross_entropy), and these losses promote float targets;
                # binary cross-entropy alone wants input and target in one dtype.
                prediction = next((a for a in call.args if not a.star and (
                    a.keyword is None or a.keyword.value == "input")), None)
                if prediction is not None:
                    self.cast_if_low(prediction.value, use)
                return
        elif views.needs_float32(module, last):
            use = f"`{dotted(func)}`, which needs float32 (or one dtype) outside autocast"
        else:
            return
        for arg in call.args:
            if arg.star:
                if self.is_low(arg.value):
                    self.stuck(arg.value, use)
                continue
            self.cast_if_low(arg.value, use)

    def unify(self, call: cst.Call) -> None:
        """`torch.lerp(norm(a), norm(b), linear(x))` under autocast, which leaves lerp's inputs
        alone: where a low-precision tensor meets others that may not be (a parameter's dtype is
        not known), every tensor becomes float32 (numbers take any dtype). Not a parameter use:
        the cast is whole here."""
        tensors = [a.value for a in call.args if not a.star and not _scalar_literal(a.value)]
        low = sum(self.is_low(value) for value in tensors)
        if self.probe is not None or not 0 < low < len(tensors):
            return
        for value in tensors:
            self.add(value, f"`{dotted(call.func)}`, whose inputs share one dtype, which "
                     "autocast does not give them")

    def match_source(self, call: cst.Call, func: cst.Attribute, position: int) -> None:
        """`target[i].index_add_(0, idx, values)` where either side may be low precision:
        the source (the argument at `position`) takes the receiver's dtype (the receiver,
        changed in place, cannot be cast)."""
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if position >= len(positional) or not duplicable(func.value):
            return
        source = positional[position].value
        if (self.is_low(source) or self.is_low(func.value)) and self.probe is None \
                and self.s.record and id(source) not in self.s.skip and self.statement:
            self.s.skip.add(id(source))
            self.s.result.casts.append(Escape(
                source, self.statement, f"`{func.attr.value}`, which needs its tensor's dtype",
                like=func.value))

    def check_store(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        """`buffer[mask] = low` into a float32 buffer: index_put needs one dtype (autocast
        or not), so the value is cast and the buffer stays float32. Basic indexing
        (`buffer[i] = low`, `buffer[:, 0] = low`) copies into a view, which converts."""
        if type(target) is cst.Subscript and self.is_buffer(target) \
                and not self.basic_index(target):
            self.cast_if_low(value, "an index assignment into a float32 tensor")
        elif type(target) is cst.Attribute and self.autocast and self.in_model_method() \
                and replaces_own_data(target, value):
            self.match_data(target, value)
        elif type(target) is cst.Subscript and self.is_low(target.value) \
                and not self.basic_index(target) and not _scalar_literal(value) \
                and duplicable(target.value):
            self.match_store(target, value)

    def in_model_method(self) -> bool:
        """Whether this scope follows a method of one of the file's nn.Module classes."""
        cls = self.s.facts.function_class.get(self.function) if self.function else None
        return cls is not None and cls in self.s.models

    def match_data(self, target: cst.Attribute, value: cst.BaseExpression) -> None:
        """`self.scale.data = values` in a model's method under autocast (a data-dependent
        initialisation, Glow's ActNorm): assigning `.data` replaces the tensor, dtype
        included, so a float32 parameter would become low precision (the scaler then refuses
        its gradients); the values take the parameter's dtype."""
        self._cast_like(value, target.value, DATA_REPLACED)

    def match_store(self, target: cst.Subscript, value: cst.BaseExpression) -> None:
        """`low[idx] = values` with advanced indexing into a low-precision tensor (a target
        cloned from a network's output) of values float32 by promotion: index_put needs one
        dtype, so the values take the target's (the target, changed in place, cannot be cast)."""
        self._cast_like(value, target.value, "an index assignment, which needs its tensor's dtype")

    def _cast_like(self, value: cst.BaseExpression, like: cst.BaseExpression, why: str) -> None:
        """`value` cast to `like`'s dtype, once, where this pass records."""
        if self.probe is None and self.s.record and id(value) not in self.s.skip \
                and self.statement:
            self.s.skip.add(id(value))
            self.s.result.casts.append(Escape(value, self.statement, why, like=like))

    def basic_index(self, target: cst.Subscript) -> bool:
        """Whether every index is an int, a slice, `...` or `None`: no advanced indexing."""
        for element in target.slice:
            index = element.slice
            if not isinstance(index, cst.Index):  # a slice
                continue
            value = index.value
            if type(value) is cst.UnaryOperation and type(value.operator) is cst.Minus:
                value = value.expression
            if not (isinstance(value, cst.Integer | cst.Ellipsis)
                    or (type(value) is cst.Name
                        and (value.value == "None" or value.value in self.counters))):
                return False
        return True

    def is_buffer(self, target: cst.Subscript) -> bool:
        """Whether `target` indexes a float32 tensor rather than a list or dict of values."""
        key = receiver_key(target.value)
        if self.is_low(target.value) or (key is not None and key in self.containers):
            return False  # a low-precision buffer, or a container of values
        return not all(
            type(e.slice) is cst.Index and type(e.slice.value) is cst.SimpleString
            for e in target.slice
        )  # a string key is a dict entry

    def cast_if_low(self, node: cst.BaseExpression, use: str) -> None:
        if type(node) is cst.Dict:  # `wandb.log({"out": out})`
            for entry in node.elements:
                if type(entry) is cst.DictElement:
                    self.cast_if_low(entry.value, use)
            return
        if self.probe is not None:
            if self.is_low(node) and self.statement is not None:
                self.probe.append(Escape(node, self.statement, use))
            return
        if id(node) in self.s.skip or not self.is_low(node) or not self.s.record:
            return
        key = receiver_key(node)
        if key is not None and key in self.containers:
            appended = self.appended.get(key)
            if appended:  # cast where the tensors go in
                for element in appended:
                    self.add(element, use)
            else:
                self.stuck(node, use)
            return
        if isinstance(node, cst.List | cst.Tuple):
            for item in node.elements:
                if type(item) is not cst.StarredElement:
                    self.cast_if_low(item.value, use)
            return
        if isinstance(node, cst.ListComp | cst.GeneratorExp):
            self.stuck(node, use)
            return
        self.add(node, use)

    def add(self, node: cst.BaseExpression, use: str, statement: Statement | None = None) -> None:
        """Cast `node` (in `statement`, by default the current one) at this use."""
        if self.probe is not None:
            if statement is not None:
                self.probe.append(Escape(node, statement, use))
            return
        if id(node) in self.s.skip or not self.s.record:
            return
        self.s.skip.add(id(node))
        statement = statement or self.statement
        assert statement is not None
        self.s.result.casts.append(Escape(node, statement, use, not self.may_be_integer(node)))

    def may_be_integer(self, node: cst.CSTNode) -> bool:
        """`node` reads a sample (`dist.sample()`, `action` bound from one): its dtype is the
        distribution's, an integer one for a categorical."""
        for child in descendants(node):
            if type(child) is cst.Call:
                if views.maybe_integer(_method(child)):
                    return True
            elif self.maybe_integer and isinstance(child, cst.Name | cst.Attribute) and (
                    dotted(child) in self.maybe_integer):
                return True
        return False

    def is_container(self, node: cst.BaseExpression) -> bool:
        """Whether `node` names a list or dict of tensors whose filling no cast reaches."""
        key = receiver_key(node)
        return key is not None and key in self.containers and not self.appended.get(key)

    def stuck(self, node: cst.CSTNode, use: str) -> None:
        if self.probe is not None:
            if isinstance(node, cst.BaseExpression) and self.statement is not None:
                self.probe.append(Escape(node, self.statement, use))
        elif self.s.record and self.statement is not None:
            self.s.result.stuck.append(Stuck(node, self.statement, use))

    # Values -------------------------------------------------------------------------------
    def summary(self, call: cst.Call) -> tuple[bool, ...] | None:
        """Which returned values of the module function (or model `forward`) `call` runs are
        low precision."""
        name = (dotted(call.func) or "").removeprefix("self.")
        forward = self.s.model_forwards.get(dotted(call.func) or "")
        if forward is not None:  # its summary assumes autocast: outside it, float32 stays
            running_low = self.autocast or any(self.is_low(a.value) for a in call.args)
            return self.s.forward_returns.get(forward) if running_low else None
        functions = self.s.by_name.get(name, [])
        if len(functions) == 1:
            low = self.low_parameters(call, functions[0])
            if low:  # what it returns given these low arguments (`topk` indices stay ints)
                return self.s.returns_given(functions[0], low, self.autocast)
        return self.s.returns.get(name)

    def low_parameters(self, call: cst.Call, function: cst.FunctionDef) -> frozenset[str]:
        """The parameters of `function` that `call` binds to low-precision arguments."""
        positional, _ = self.s.facts.parameters(function)
        low: set[str] = set()
        position = 0
        for arg in call.args:
            if arg.star:
                return frozenset()
            if arg.keyword is not None:
                name: str | None = arg.keyword.value
            else:
                name = positional[position] if position < len(positional) else None
                position += 1
            if name is not None and self.is_low(arg.value):
                low.add(name)
        return frozenset(low)

    def held(self, call: cst.Call) -> tuple[bool, ...]:
        """Which returned values of the module function (or model `forward`) `call` runs are
        lists or dicts the function filled (`attentions.append(a)`; `return out, attentions`)."""
        return self._per_element(call, self.s.forward_held, self.s.held)

    def samples_of(self, call: cst.Call) -> tuple[bool, ...]:
        """Which returned values of the module function (or model `forward`) `call` runs may be
        integer tensors (`return dist.sample(), logp`)."""
        return self._per_element(call, self.s.forward_samples, self.s.samples)

    def _per_element(
        self, call: cst.Call, by_forward: dict[cst.FunctionDef, tuple[bool, ...]],
        by_name: dict[str, tuple[bool, ...]],
    ) -> tuple[bool, ...]:
        """A per-returned-value fact of the model `forward` or module function `call` runs."""
        forward = self.s.model_forwards.get(dotted(call.func) or "")
        if forward is not None:
            return by_forward.get(forward, ())
        return by_name.get((dotted(call.func) or "").removeprefix("self."), ())

    def is_low(self, node: cst.BaseExpression | None) -> bool:
        """Whether `node` may evaluate to a low-precision tensor (or a container of them)."""
        if node is None:
            return False
        key = receiver_key(node)
        if key is not None and key in self.low:
            return True
        if type(node) is cst.Subscript:
            if type(node.value) is cst.Call and views.values_and_indices(_method(node.value)):
                index = node.slice[0].slice
                if type(index) is cst.Index and getattr(index.value, "value", "") == "1":
                    return False
            return self.is_low(node.value)
        if type(node) is cst.Attribute:  # `out.data`, `outputs.logits` of a model output
            return node.attr.value not in NOT_TENSOR_ATTRIBUTES and self.is_low(node.value)
        if type(node) is cst.Call:
            return self.call_is_low(node)
        if type(node) is cst.BinaryOperation:
            return self.is_low(node.left) or self.is_low(node.right)
        if type(node) is cst.UnaryOperation:
            return self.is_low(node.expression)
        if type(node) is cst.IfExp:
            return self.is_low(node.body) or self.is_low(node.orelse)
        if isinstance(node, cst.Tuple | cst.List):
            return any(self.is_low(e.value) for e in node.elements)
        if isinstance(node, cst.ListComp | cst.GeneratorExp):
            saved = set(self.low)
            clause: cst.CompFor | None = node.for_in
            while clause is not None:
                self.bind_iteration(clause.target, clause.iter)
                clause = clause.inner_for_in
            low = self.is_low(node.elt)
            self.low = saved
            return low
        return False

    def call_is_low(self, call: cst.Call) -> bool:
        func = call.func
        facts, kinds = self.s.facts, self.s.kinds
        args_low = any(self.is_low(a.value) for a in call.args)
        method = _method(call)
        resolved = facts.imports.resolve(func)
        if resolved is not None:
            module, _, last = resolved.rpartition(".")
            if module.startswith("numpy") or views.function_not_low(last):
                return False
            if is_loss_call(call, facts, kinds):
                return False  # losses run in float32 under autocast
            if views.may_run_low(module, last):
                return self.autocast or args_low
            return args_low
        if method is not None:
            if views.method_not_low(method):
                return False
            built_by = kinds.constructors.get(dotted(func) or "", "")
            runs_low = views.module_may_run_low(built_by.removeprefix("torch.nn."))
            if runs_low is not None and built_by.startswith("torch.nn."):  # `self.norm(x)`
                return (self.autocast and runs_low) or args_low
            if is_model_call(call, kinds):
                return self.autocast or args_low
            assert type(func) is cst.Attribute
            if _is_layer_call(call) and method in self.s.by_name:  # `self.helper(...)`
                summary = self.summary(call)
                if summary is not None:
                    return any(summary)
            return self.is_low(func.value) or (self.autocast and _is_layer_call(call))
        if self.autocast and (dotted(func) in self.layers or _is_indexed_layer(func)):
            return True  # `for layer in self.layers: layer(x)`, `self.blocks[i](x)`
        summary = self.summary(call)
        if summary is not None:
            return any(summary)
        if is_loss_call(call, facts, kinds):
            return False
        if is_model_call(call, kinds) or _is_layer_call(call):
            return self.autocast
        return args_low


# Nodes `check` has nothing to look at in: other scopes, and leaves (a third of all nodes).
_NOTHING_TO_CHECK = frozenset({
    cst.Lambda, cst.FunctionDef, cst.ClassDef, cst.Name, cst.Integer, cst.Float, cst.Imaginary,
    cst.SimpleString, cst.Ellipsis,
})


def _method(call: cst.Call) -> str | None:
    return call.func.attr.value if type(call.func) is cst.Attribute else None


def _is_layer_call(call: cst.Call) -> bool:
    """`self.fc(x)` inside a model: a submodule's forward."""
    key = dotted(call.func) or ""
    return key.startswith("self.") and key.count(".") == 1


def _is_indexed_layer(func: cst.BaseExpression) -> bool:
    """`self.blocks[i]`: a submodule of a ModuleList."""
    return type(func) is cst.Subscript and _is_submodule(func.value)


def _is_submodule(node: cst.BaseExpression) -> bool:
    key = dotted(node) or ""
    return key.startswith("self.") and key.count(".") == 1


def _counters(loop: cst.For) -> set[str]:
    """The loop variables that count: `for i in range(n)`, `i` of `for i, x in enumerate(xs)`."""
    iterated = loop.iter
    target: cst.BaseExpression = loop.target
    if type(iterated) is not cst.Call:
        return set()
    name = dotted(iterated.func)
    if name == "enumerate" and type(target) is cst.Tuple and target.elements:
        target = target.elements[0].value
    elif name != "range":
        return set()
    return {key for key in [dotted(target)] if key is not None}


def _submodules_iterated(loop: cst.For) -> set[str]:
    """The loop variables bound to a model's submodules: `for layer in self.layers`,
    `for i, block in enumerate(self.blocks)`."""
    iterated = loop.iter
    target: cst.BaseExpression = loop.target
    if type(iterated) is cst.Call and dotted(iterated.func) == "enumerate" and iterated.args \
            and type(target) is cst.Tuple and len(target.elements) == 2:
        iterated, target = iterated.args[0].value, target.elements[1].value
    if not _is_submodule(iterated):
        return set()
    return {name for name in [dotted(target)] if name is not None}


def _iterated_parts(
    target: cst.BaseExpression, iterated: cst.BaseExpression
) -> list[tuple[cst.BaseExpression, cst.BaseExpression | None]] | None:
    """`for a, b in zip(x, y)` -> [(a, x), (b, y)]; `for i, a in enumerate(x)` ->
    [(i, None), (a, x)]; None for any other loop."""
    if not (isinstance(target, cst.Tuple | cst.List) and type(iterated) is cst.Call):
        return None
    if any(type(e) is cst.StarredElement for e in target.elements) or any(
            a.star or a.keyword is not None for a in iterated.args):
        return None
    targets = [e.value for e in target.elements]
    name = dotted(iterated.func)
    args = [a.value for a in iterated.args]
    if name == "zip" and len(args) == len(targets):
        return list(zip(targets, args, strict=True))
    if name == "enumerate" and len(args) == 1 and len(targets) == 2:
        return [(targets[0], None), (targets[1], args[0])]
    return None


def _elements(value: cst.BaseExpression | None) -> list[cst.BaseExpression] | None:
    if isinstance(value, cst.Tuple | cst.List) and not any(
        type(e) is cst.StarredElement for e in value.elements
    ):
        return [e.value for e in value.elements]
    return None


def _model_classes(facts: ModuleFacts, kinds: KindTable) -> set[cst.ClassDef]:
    """The module's nn.Module classes, those derived from its own included (Glow's
    `ActNorm(AffineConstantFlow)`)."""
    return {cls for cls in facts.classes if _is_module_class(cls, facts)} | set(
        kinds.model_classes())


def _run_under_caller(
    facts: ModuleFacts, models: set[cst.ClassDef], in_region: set[int]
) -> set[cst.FunctionDef]:
    """Functions that may run under their caller's autocast: the methods of the module's
    nn.Module classes, and the module's functions called from a region."""
    under = {f for f, cls in facts.function_class.items()
             if cls in models and f.name.value != "__init__"}
    by_name = {f.name.value: f for f in facts.functions}
    for site in facts.calls:
        if not any(id(s) in in_region for s in facts.enclosing_statements(site.statement)):
            continue
        name = (dotted(site.call.func) or "").removeprefix("self.")
        if name in by_name:
            under.add(by_name[name])
    return under


def _passed_forwards(
    facts: ModuleFacts, by_name: dict[str, list[cst.FunctionDef]],
    bound: dict[str, cst.FunctionDef],
) -> dict[tuple[cst.FunctionDef, str], cst.FunctionDef]:
    """(function, parameter) -> the `forward` of the file's class whose instance every call of
    the function passes there: built in the call (`train(model, ContrastiveLoss(1.0), opt)`),
    bound to a name first (`loss_fn = ContrastiveLoss(1.0)`), or handed on by a caller's own
    parameter (`fit(..., loss_fn)` calling `train_epoch(..., loss_fn)`)."""
    forwards = _forwards_by_class(facts)
    passed: dict[tuple[cst.FunctionDef, str], cst.FunctionDef] = {}
    for _ in range(3):  # a value handed through up to three functions
        seen: dict[tuple[cst.FunctionDef, str], set[cst.FunctionDef | None]] = {}
        for site in facts.calls:
            callees = by_name.get(dotted(site.call.func) or "", [])
            if len(callees) != 1:
                continue
            positional, _ = facts.parameters(callees[0])
            for position, arg in enumerate(site.call.args):
                name = arg.keyword.value if arg.keyword is not None else (
                    positional[position] if position < len(positional) else None)
                if name is None or arg.star:
                    continue
                value, key = arg.value, dotted(arg.value) or ""
                if type(value) is cst.Call:
                    forward = forwards.get(dotted(value.func) or "")
                elif site.function is not None and (site.function, key) in passed:
                    forward = passed[site.function, key]
                else:
                    forward = bound.get(key)
                seen.setdefault((callees[0], name), set()).add(forward)
        passed = {key: next(iter(found)) for key, found in seen.items()  # type: ignore[misc]
                  if len(found) == 1 and None not in found}
    return passed


def _forwards_by_class(facts: ModuleFacts) -> dict[str, cst.FunctionDef]:
    """The `forward` of each of the file's classes that defines one, by class name."""
    return {cls.name.value: f for f, cls in facts.function_class.items()
            if f.name.value == "forward"}


def _model_forwards(facts: ModuleFacts) -> dict[str, cst.FunctionDef]:
    """Keys bound to an instance of one of the file's classes (`model = Net().to(device)`),
    each with that class's `forward`."""
    forwards = _forwards_by_class(facts)
    found: dict[str, cst.FunctionDef] = {}
    for binding in facts.bindings:
        value = binding.value
        while type(value) is cst.Call and type(value.func) is cst.Attribute \
                and value.func.attr.value in ("to", "cuda", "cpu", "train", "eval"):
            value = value.func.value
        forward = forwards.get(dotted(value.func) or "") if type(value) is cst.Call else None
        if forward is not None and len(binding.keys) == 1:
            found[binding.keys[0]] = forward
    return found


def _is_module_class(cls: cst.ClassDef, facts: ModuleFacts) -> bool:
    for base in cls.bases:
        resolved = facts.imports.resolve(base.value) or ""
        if resolved.startswith("torch.nn.") or resolved == "torch.nn.Module":
            return True
    return False


def replaces_own_data(target: cst.Attribute, value: cst.BaseExpression) -> bool:
    """`self.scale.data = values` (not a scalar): the tensor of a module's own parameter or
    buffer replaced, dtype included, by `values`'."""
    return (target.attr.value == "data" and type(target.value) is cst.Attribute
            and type(target.value.value) is cst.Name and target.value.value.value == "self"
            and not _scalar_literal(value) and not _already_cast_to(value, target.value))


def _already_cast_to(value: cst.BaseExpression, tensor: cst.BaseExpression) -> bool:
    """`values.to(self.s.dtype)` or `values.type_as(self.s)`: already of `tensor`'s dtype."""
    if type(value) is not cst.Call or type(value.func) is not cst.Attribute or len(
            value.args) != 1:
        return False
    name, argument = value.func.attr.value, value.args[0].value
    if name == "type_as":
        return dotted(argument) == dotted(tensor)
    return name == "to" and type(argument) is cst.Attribute and argument.attr.value == "dtype" \
        and dotted(argument.value) == dotted(tensor)


def _scalar_literal(value: cst.BaseExpression) -> bool:
    """`0.0`, `-1`, `True`, `float("inf")`: a Python scalar, which index_put takes in any dtype."""
    if type(value) is cst.UnaryOperation:
        value = value.expression
    if isinstance(value, cst.Integer | cst.Float | cst.Imaginary):
        return True
    if type(value) is cst.Name:
        return value.value in ("True", "False", "None")
    return type(value) is cst.Call and type(value.func) is cst.Name and value.func.value in (
        "float", "int", "bool")
