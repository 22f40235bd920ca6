"""The uses that need float32 (or one dtype) and crash on a value autocast made low precision:
`.numpy()` and numpy functions (numpy has no bfloat16), float32 models and matmuls after
the region (`Input type (c10::BFloat16) and weight type (float) should be the same`), losses
mixing it with float32 tensors, index puts into float32 buffers, one-dtype ops autocast
leaves alone (`torch.lerp`), and assignments replacing a parameter's `.data`.

`Float32Uses` is the flow's `Uses` hook: told of each expression and store, it asks the scope
for the values there and records a cast (`Escape`) or a value no single cast reaches
(`Stuck`). In probe mode it collects, instead, the uses a function's parameters reach: what a
call of the function must cast before it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis.dtype import views
from amprewrite.analysis.dtype.flow import Flow, Scope, in_array_library
from amprewrite.analysis.facts import Statement
from amprewrite.analysis.forward import is_loss_call, is_model_call
from amprewrite.analysis.names import dotted, duplicable, receiver_key, walk
from amprewrite.analysis.tree import children
from amprewrite.analysis.unsafe_losses import unsafe_calls

# Why a value assigned to a parameter's `.data` takes its dtype.
DATA_REPLACED = "an assignment to `.data`, which would change its dtype"


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
    # inputs of saturating ops (`torch.tanh(z)`) whose result is subtracted from 1
    saturating: list[Escape] = field(default_factory=list)


ParameterUses = dict[int | str, list[Escape]]  # by position and by name


class ModuleUses:
    """The module-wide part: what is recorded, the nodes already cast, the objects of array
    and logging libraries, and the float32 uses each callee's parameters reach."""

    def __init__(self, flow: Flow, skip: set[int]) -> None:
        self.flow, self.skip = flow, skip
        self.result = Escapes()
        # (callee name, autocast, the forward a parameter is bound to) -> parameter uses
        self.parameter_uses: dict[tuple[str, bool, cst.FunctionDef | None], ParameterUses] = {}
        facts = flow.facts
        self.array_objects = {  # `writer = SummaryWriter(...)`, `run = wandb.init(...)`
            key for b in facts.bindings if type(b.value) is cst.Call
            and in_array_library(facts.imports.resolve(b.value.func) or "") for key in b.keys
        }

    def record(self) -> None:
        """Follow the module's statements and every function, recording each use."""
        self.flow.follow(None, Float32Uses(self), autocast=False)
        for function in self.flow.facts.functions:
            self.flow.follow(function, Float32Uses(self), self.flow.hook_parameters(function))

    def float32_parameters(self, call: cst.Call, autocast: bool,
                           caller: cst.FunctionDef | None) -> ParameterUses:
        """The parameters of the module function `call` reaches whose value reaches a float32
        use inside it, each with those uses."""
        name = (dotted(call.func) or "").removeprefix("self.")
        passed = self.flow.passed_forwards.get((caller, name)) if caller is not None else None
        callees = [passed] if passed is not None else self.flow.callees(name)
        key = (name, autocast, passed)
        if key not in self.parameter_uses:
            self.parameter_uses[key] = {}  # a recursive call sees none
            uses: ParameterUses = {}
            for function in callees:
                uses.update(self._parameter_uses(function, name, autocast))
            self.parameter_uses[key] = uses
        return self.parameter_uses[key]

    def _parameter_uses(self, function: cst.FunctionDef, name: str, autocast: bool
                        ) -> ParameterUses:
        """Each parameter whose value makes a float32 use inside `function` low precision;
        a use that is low whatever the arguments (a layer's output under autocast) is the
        function's own, cast where it is, not the callers'."""
        autocast = autocast or function in self.flow.under_caller
        positional, keyword_only = self.flow.facts.parameters(function)
        own: set[int] | None = None  # computed once, when a parameter reaches any use
        uses: ParameterUses = {}
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

    def _probe(self, function: cst.FunctionDef, low: set[str], autocast: bool) -> list[Escape]:
        """The float32 uses inside `function` that low-precision `low` reach."""
        probe: list[Escape] = []
        self.flow.follow(function, Float32Uses(self, probe), low, autocast)
        return probe


def _arguments_for(call: cst.Call, parameters: ParameterUses
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


class Float32Uses:
    """The uses one scope passes that need float32; with `probe`, only collected there."""

    def __init__(self, module: ModuleUses, probe: list[Escape] | None = None) -> None:
        self.m = module
        self.probe = probe
        self.scope: Scope | None = None

    def expression(self, scope: Scope, node: cst.CSTNode) -> None:
        """Every use inside `node` that needs float32 (comprehensions see their targets)."""
        self.scope = scope
        self.check(node)

    def store(self, scope: Scope, target: cst.BaseExpression,
              value: cst.BaseExpression) -> None:
        """`buffer[mask] = low` into a float32 buffer: index_put needs one dtype (autocast
        or not), so the value is cast and the buffer stays float32. Basic indexing
        (`buffer[i] = low`, `buffer[:, 0] = low`) copies into a view, which converts."""
        self.scope = scope
        if type(target) is cst.Subscript and scope.is_buffer(target) \
                and not self.basic_index(target):
            self.cast_if_low(value, "an index assignment into a float32 tensor")
        elif type(target) is cst.Attribute and scope.autocast and scope.in_model_method() \
                and replaces_own_data(target, value):
            # `self.scale.data = values` in a model's method under autocast (Glow's ActNorm):
            # `.data` replaced, dtype included, would make a float32 parameter low precision
            self._cast_like(value, target.value, DATA_REPLACED)
        elif type(target) is cst.Subscript and scope.is_low(target.value) \
                and not self.basic_index(target) and not scalar_literal(value) \
                and duplicable(target.value) and not _holds_values(scope, target):
            # `low[idx] = values` (a target cloned from a network's output) of values float32
            # by promotion: the values take the target's dtype (it is changed in place)
            self._cast_like(value, target.value,
                            "an index assignment, which needs its tensor's dtype")

    @property
    def _scope(self) -> Scope:
        assert self.scope is not None
        return self.scope

    def check(self, node: cst.CSTNode) -> None:
        if type(node) in _NOTHING_TO_CHECK:
            return
        scope = self._scope
        if id(node) in scope.flow.in_region and not scope.autocast:  # a forward kept in autocast
            scope.autocast = True
            self.check(node)
            scope.autocast = False
            return
        if isinstance(node, cst.ListComp | cst.SetComp | cst.GeneratorExp | cst.DictComp):
            saved = dict(scope.env)
            clause: cst.CompFor | None = node.for_in
            while clause is not None:
                self.check(clause.iter)
                scope.bind_iteration(clause.target, clause.iter)
                clause = clause.inner_for_in
            for part in ("elt", "key", "value"):
                child = getattr(node, part, None)
                if child is not None:
                    self.check(child)
            scope.env = saved
            return
        if type(node) is cst.Call:
            self.check_call(node)
        elif type(node) is cst.BinaryOperation:
            if not scope.autocast and type(node.operator) is cst.MatrixMultiply:
                for operand in (node.left, node.right):
                    self.cast_if_low(operand, "a float32 matmul (`@`)")
            elif type(node.operator) is cst.Subtract and _is_one(node.left):
                self.saturated_difference(node)
        for child in children(node):
            self.check(child)

    def check_call(self, call: cst.Call) -> None:
        scope = self._scope
        func = call.func
        if type(func) is cst.Attribute:
            position = views.receiver_dtype_source(func.attr.value)
            if position is not None:
                self.match_source(call, func, position)
        if type(func) is cst.Attribute and func.attr.value == "numpy" and not call.args:
            self.cast_if_low(func.value, "`.numpy()` (numpy has no bfloat16)")
            return
        resolved = scope.flow.facts.imports.resolve(func) or ""
        module, _, last = resolved.rpartition(".")
        if in_array_library(resolved) or (
            type(func) is cst.Attribute and receiver_key(func.value) in self.m.array_objects
        ):
            for arg in call.args:
                self.cast_if_low(arg.value, f"`{dotted(func)}` (numpy has no bfloat16)")
            return
        needs = self.m.float32_parameters(call, scope.autocast, scope.function)
        if needs:
            for arg, uses in _arguments_for(call, needs):
                if scope.is_low(arg.value) and (scope.autocast or scope.is_container(arg.value)):
                    # Under autocast the callee's layers would make a cast argument low again;
                    # `.float()` fits the tensors, not a list: cast where they are used
                    for escape in uses:
                        self.add(escape.node, escape.use, escape.statement)
                else:
                    self.cast_if_low(arg.value, uses[0].use)
            return
        if scope.autocast:
            if views.may_mix_under_autocast(module, last):
                self.unify(call)
            return  # under autocast, models and matmuls take any float dtype
        self._float32_call(call, module, last)

    def _float32_call(self, call: cst.Call, module: str, last: str) -> None:
        """A call outside autocast whose inputs must be float32: a model, a matmul, a loss, an
        op with no low-precision kernel."""
        scope = self._scope
        func = call.func
        facts, kinds = scope.flow.facts, scope.flow.kinds
        if is_model_call(call, kinds):
            use = f"the float32 model `{dotted(func)}`"
        elif views.runs_low_one_dtype(module, last):
            use = f"`{dotted(func)}` with float32 weights"
        elif is_loss_call(call, facts, kinds):
            use = f"the loss `{dotted(func) or 'call'}` with float32 inputs"
            if not unsafe_calls(call, facts, kinds):
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
                if scope.is_low(arg.value):
                    self.stuck(arg.value, use)
                continue
            self.cast_if_low(arg.value, use)

    def saturated_difference(self, difference: cst.BinaryOperation) -> None:
        """`1 - a.pow(2)` with `a = torch.tanh(z)` (a squashed action's log-probability),
        `1 - torch.sigmoid(x)`: in low precision the saturating op rounds to 1 and the
        difference to 0, so its input is cast to float32 where the op runs."""
        scope = self._scope
        if self.probe is not None:
            return
        text = scope.flow.facts.module.code_for_node(difference)
        for node in walk(difference.right):
            found: tuple[cst.BaseExpression, Statement] | None = None
            if type(node) is cst.Call and scope.statement is not None:
                found = (node, scope.statement)
            elif isinstance(node, cst.Name | cst.Attribute):
                found = scope.saturated.get(dotted(node) or "")
            if found is None:
                continue
            call, statement = found
            source = scope.saturating_input(call) if call is node else _saturating_argument(
                call)
            if source is None or id(source) in self.m.skip:
                continue
            self.m.skip.add(id(source))
            self.m.result.saturating.append(Escape(
                source, statement, f"`{_op_name(call)}`, whose result rounds to 1 in low precision "
                f"before `{' '.join(text.split())}`"))

    def unify(self, call: cst.Call) -> None:
        """`torch.lerp(norm(a), norm(b), linear(x))` under autocast, which leaves lerp's inputs
        alone: where a low-precision tensor meets others that may not be (a parameter's dtype is
        not known), every tensor becomes float32 (numbers take any dtype). Not a parameter use:
        the cast is whole here."""
        scope = self._scope
        tensors = [a.value for a in call.args if not a.star and not scalar_literal(a.value)]
        low = sum(scope.is_low(value) for value in tensors)
        if self.probe is not None or not 0 < low < len(tensors):
            return
        for value in tensors:
            self.add(value, f"`{dotted(call.func)}`, whose inputs share one dtype, which "
                     "autocast does not give them")

    def match_source(self, call: cst.Call, func: cst.Attribute, position: int) -> None:
        """`target[i].index_add_(0, idx, values)` where either side may be low precision:
        the source (the argument at `position`) takes the receiver's dtype (the receiver,
        changed in place, cannot be cast)."""
        scope = self._scope
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if position >= len(positional) or not duplicable(func.value):
            return
        source = positional[position].value
        if scope.is_low(source) or scope.is_low(func.value):
            self._cast_like(source, func.value,
                            f"`{func.attr.value}`, which needs its tensor's dtype")

    def _cast_like(self, value: cst.BaseExpression, like: cst.BaseExpression, why: str) -> None:
        """`value` cast to `like`'s dtype, once, where this pass records."""
        statement = self._scope.statement
        if self.probe is None and id(value) not in self.m.skip and statement:
            self.m.skip.add(id(value))
            self.m.result.casts.append(Escape(value, statement, why, like=like))

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
                        and (value.value == "None" or value.value in self._scope.counters))):
                return False
        return True

    def cast_if_low(self, node: cst.BaseExpression, use: str) -> None:
        scope = self._scope
        if type(node) is cst.Dict:  # `wandb.log({"out": out})`
            for entry in node.elements:
                if type(entry) is cst.DictElement:
                    self.cast_if_low(entry.value, use)
            return
        if self.probe is not None:
            if scope.is_low(node) and scope.statement is not None:
                self.probe.append(Escape(node, scope.statement, use))
            return
        if id(node) in self.m.skip or not scope.is_low(node):
            return
        key = receiver_key(node)
        held = scope.held(key)
        if held is not None and held.container:
            appended = scope.appended.get(key or "")
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
        if id(node) in self.m.skip:
            return
        self.m.skip.add(id(node))
        statement = statement or self._scope.statement
        assert statement is not None
        floating = not self._scope.value_of(node).integer
        self.m.result.casts.append(Escape(node, statement, use, floating))

    def stuck(self, node: cst.CSTNode, use: str) -> None:
        statement = self._scope.statement
        if self.probe is not None:
            if isinstance(node, cst.BaseExpression) and statement is not None:
                self.probe.append(Escape(node, statement, use))
        elif statement is not None:
            self.m.result.stuck.append(Stuck(node, statement, use))


# Nodes `check` has nothing to look at in: other scopes, and leaves (a third of all nodes).
_NOTHING_TO_CHECK = frozenset({
    cst.Lambda, cst.FunctionDef, cst.ClassDef, cst.Name, cst.Integer, cst.Float, cst.Imaginary,
    cst.SimpleString, cst.Ellipsis,
})


def _holds_values(scope: Scope, target: cst.Subscript) -> bool:
    """Whether `target` indexes a list or dict of tensors rather than a tensor."""
    held = scope.held(receiver_key(target.value))
    return held is not None and held.container


def _is_one(node: cst.BaseExpression) -> bool:
    """`1` or `1.0`."""
    return isinstance(node, cst.Integer | cst.Float) and node.evaluated_value == 1


def _op_name(call: cst.BaseExpression) -> str:
    """`torch.tanh`, or `.sigmoid()` for a method."""
    func = call.func if type(call) is cst.Call else call
    name = dotted(func)
    if name is None and type(func) is cst.Attribute:
        return f".{func.attr.value}()"
    return name or "call"


def _saturating_argument(call: cst.BaseExpression) -> cst.BaseExpression | None:
    """The input of a saturating call already found low where it was bound."""
    if type(call) is not cst.Call:
        return None
    if call.args and call.args[0].keyword is None:
        return call.args[0].value
    return call.func.value if type(call.func) is cst.Attribute else None


def replaces_own_data(target: cst.Attribute, value: cst.BaseExpression) -> bool:
    """`self.scale.data = values` (not a scalar): the tensor of a module's own parameter or
    buffer replaced, dtype included, by `values`'."""
    return (target.attr.value == "data" and type(target.value) is cst.Attribute
            and type(target.value.value) is cst.Name and target.value.value.value == "self"
            and not scalar_literal(value) and not _already_cast_to(value, target.value))


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


def scalar_literal(value: cst.BaseExpression) -> bool:
    """`0.0`, `-1`, `True`, `float("inf")`: a Python scalar, which index_put takes in any dtype."""
    if type(value) is cst.UnaryOperation:
        value = value.expression
    if isinstance(value, cst.Integer | cst.Float | cst.Imaginary):
        return True
    if type(value) is cst.Name:
        return value.value in ("True", "False", "None")
    return type(value) is cst.Call and type(value.func) is cst.Name and value.func.value in (
        "float", "int", "bool")
