"""One interpreter for the precision of values: each function's body in source order, keys
bound to `Value`s, through containers (`outputs.append(out)`), loops and comprehensions over
them, and the returns of the module's functions, summarised on demand and memoised.

Model methods (and the functions a region calls) run under their caller's autocast. What a
use of a value needs (float32 for numpy, one dtype for an index put) is not decided here:
a `Uses` hook given to a scope is told of each expression and store in order, and reads the
values the scope holds at that point (`dtype.sinks`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import libcst as cst

from amprewrite.analysis.dtype import views
from amprewrite.analysis.dtype.ops import (
    ARRAY_LIBRARIES,
    FLOAT32_NAMESPACES,
    FLOATING_DTYPES,
    LOW_DTYPES,
    NOT_TENSOR_ATTRIBUTES,
    OTHER_DTYPES,
    Cast,
    Op,
    Returns,
)
from amprewrite.analysis.dtype.value import (
    AUTOCAST_LOW,
    CAST_LOW,
    FLOAT32,
    FLOAT32_VALUE,
    LOW_VALUE,
    MAYBE_LOW_VALUE,
    SCALAR_VALUE,
    UNKNOWN_VALUE,
    Value,
    join_all,
)
from amprewrite.analysis.facts import ModuleFacts, Statement
from amprewrite.analysis.forward import is_loss_call, is_model_call
from amprewrite.analysis.kinds import KindTable
from amprewrite.analysis.names import dotted, receiver_key, target_keys

Returned = tuple[Value, ...]  # a function's returned values, one per element of its tuple
_SCALAR_BUILTINS = frozenset({"len", "int", "float", "bool", "str", "round", "isinstance"})


class Uses(Protocol):
    """What a scope tells of the uses it passes, in source order."""

    def expression(self, scope: Scope, node: cst.CSTNode) -> None: ...

    def store(self, scope: Scope, target: cst.BaseExpression,
              value: cst.BaseExpression) -> None: ...


def in_array_library(resolved: str) -> bool:
    """Whether `resolved` names numpy, a plotting or a logging library (no bfloat16)."""
    return any(resolved == lib or resolved.startswith(lib + ".") for lib in ARRAY_LIBRARIES)


class Flow:
    """The module-wide part: regions, the functions that run under a caller's autocast, and the
    summaries of what functions return."""

    def __init__(self, facts: ModuleFacts, kinds: KindTable, in_region: set[int]) -> None:
        self.facts, self.kinds, self.in_region = facts, kinds, in_region
        self.models = model_classes(facts, kinds)
        self.under_caller = _run_under_caller(facts, self.models, in_region)
        self.by_name: dict[str, list[cst.FunctionDef]] = {}
        for function in facts.functions:
            self.by_name.setdefault(function.name.value, []).append(function)
        self.hooks = _hooks(facts, self.by_name)  # hook -> whether it runs in the forward
        self.under_caller.update(hook for hook, forward in self.hooks.items() if forward)
        self.model_forwards = _model_forwards(facts)  # `model` -> Net.forward for `Net()`
        self.passed_forwards = _passed_forwards(facts, self.by_name, self.model_forwards)
        # (function, low parameters, autocast) -> what it returns
        self.summaries: dict[tuple[cst.FunctionDef, frozenset[str], bool], Returned] = {}
        self.states: dict[cst.ClassDef, dict[str, Value]] = {}  # class -> its low attributes

    def hook_parameters(self, function: cst.FunctionDef) -> list[str]:
        """The tensors a module hook receives (`inputs`, `output`, `grad_output`): the
        activations' dtype, low precision under autocast; none for another function."""
        if function not in self.hooks:
            return []
        positional, _ = self.facts.parameters(function)
        return positional[1:]  # after the module

    def state(self, cls: cst.ClassDef) -> dict[str, Value]:
        """The attributes (`self.covariances`) the methods of `cls` store low-precision values
        in, for every method to read (a hook's statistics read in `step()`), and the lists and
        dicts its methods build (`self.covariances = {}` in `__init__`)."""
        if cls not in self.states:
            found: dict[str, Value] = {}
            self.states[cls] = found  # each method followed sees what those before it stored
            for function, owner in self.facts.function_class.items():
                if owner is cls:
                    scope = self.follow(function, low=self.hook_parameters(function))
                    for key, value in scope.env.items():
                        if key.startswith("self.") and (value.low or value.container):
                            found[key] = found[key].join(value) if key in found else value
        return self.states[cls]

    def follow(self, function: cst.FunctionDef | None, uses: Uses | None = None,
               low: Iterable[str] = (), autocast: bool | None = None) -> Scope:
        """`function`'s body (None: the module's statements) followed with parameters `low`
        low precision, under autocast when `autocast` (by default: when it runs under its
        caller's), telling `uses` of each use."""
        if autocast is None:
            autocast = function in self.under_caller
        scope = Scope(self, autocast, function, uses)
        scope.env.update((name, LOW_VALUE) for name in low)
        scope.block(function.body.body if function is not None else self.facts.module.body)
        return scope

    def returns(self, function: cst.FunctionDef, low: frozenset[str], autocast: bool
                ) -> Returned:
        """What `function` returns when parameters `low` are low precision."""
        key = (function, low, autocast or function in self.under_caller)
        if key not in self.summaries:
            self.summaries[key] = ()  # a recursive call sees nothing
            self.summaries[key] = self.follow(function, low=low, autocast=key[2]).returned
        return self.summaries[key]

    def returns_by_name(self, name: str) -> Returned | None:
        """What the module's functions named `name` return (joined where they agree in
        length, else the last one's); None when there is none."""
        functions = self.by_name.get(name)
        if not functions:
            return None
        found = [self.returns(f, frozenset(), False) for f in functions]
        if any(len(r) != len(found[-1]) for r in found):
            return found[-1]
        return tuple(join_all(list(values)) for values in zip(*found, strict=True))

    def callees(self, name: str) -> list[cst.FunctionDef]:
        """The module's functions `name` may call: `helper`, `self.helper`, or the methods
        of the module's classes named like the attribute of `meter.update`."""
        if "." not in name:
            return self.by_name.get(name, [])
        method = name.rsplit(".", 1)[1]
        return [f for f in self.by_name.get(method, []) if f in self.facts.function_class]


class Scope:
    """The values of one function body's keys, in source order."""

    def __init__(self, flow: Flow, autocast: bool, function: cst.FunctionDef | None,
                 uses: Uses | None) -> None:
        self.flow = flow
        self.function = function
        self.uses = uses
        self.autocast = autocast
        self.env: dict[str, Value] = {}
        self.appended: dict[str, list[cst.BaseExpression]] = {}  # container -> tensors put in
        self.returned: Returned = ()
        self.statement: Statement | None = None
        self.layers: set[str] = set()  # loop variables over a model's submodules
        self.counters: set[str] = set()  # loop variables counting (`for i in range(n)`)
        # keys bound to a saturating op of a low-precision input (`a = torch.tanh(z)`)
        self.saturated: dict[str, tuple[cst.BaseExpression, Statement]] = {}

    # Statements ---------------------------------------------------------------------------
    def block(self, body: Iterable[cst.CSTNode]) -> None:
        for statement in body:
            self.compound_or_line(statement)

    def compound_or_line(self, statement: cst.CSTNode) -> None:
        if isinstance(statement, cst.FunctionDef | cst.ClassDef):
            return
        outer_autocast, outer_statement = self.autocast, self.statement
        if id(statement) in self.flow.in_region:
            self.autocast = True
        if isinstance(statement, cst.SimpleStatementLine | cst.BaseCompoundStatement):
            self.statement = statement
        if type(statement) is cst.SimpleStatementLine:
            for small in statement.body:
                self.small(small)
        elif type(statement) is cst.For:
            self.use(statement.iter)
            self.bind_iteration(statement.target, statement.iter)
            self.layers.update(_submodules_iterated(statement))
            self.counters.update(_counters(statement))
            self.block(statement.body.body)
            self.suite(statement.orelse)
        elif isinstance(statement, cst.If | cst.While):
            self.use(statement.test)
            self.block(statement.body.body)
            self.suite(statement.orelse)
        elif type(statement) is cst.With:
            for item in statement.items:
                self.use(item.item)
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

    def use(self, node: cst.CSTNode) -> None:
        if self.uses is not None:
            self.uses.expression(self, node)

    def small(self, small: cst.BaseSmallStatement) -> None:
        if type(small) is cst.Assign:
            self.use(small.value)
            value = self.value_of(small.value)
            saturating = self.saturating_input(small.value)
            for target in small.targets:
                if self.uses is not None:
                    self.uses.store(self, target.target, small.value)
                self.bind(target.target, value, small.value)
                for key in target_keys(target.target):
                    if saturating is not None and self.statement is not None:
                        self.saturated[key] = (small.value, self.statement)
                    else:
                        self.saturated.pop(key, None)
        elif type(small) is cst.AnnAssign and small.value is not None:
            self.use(small.value)
            self.bind(small.target, self.value_of(small.value), small.value)
        elif type(small) is cst.AugAssign:
            self.use(small.value)
        elif type(small) is cst.Return and small.value is not None:
            self.use(small.value)
            self.record_return(small.value)
        elif type(small) is cst.Expr:
            self.use(small.value)
            self.track_append(small.value)

    def record_return(self, value: cst.BaseExpression) -> None:
        """Several returns of one length join element by element; another length replaces."""
        elements = [e.value for e in value.elements] if type(value) is cst.Tuple else [value]
        returned = tuple(self.value_of(e) for e in elements)
        if len(returned) == len(self.returned):
            returned = tuple(a.join(b) for a, b in zip(returned, self.returned, strict=True))
        self.returned = returned

    def bind_iteration(self, target: cst.BaseExpression, iterated: cst.BaseExpression) -> None:
        """Bind a loop's target: element by element through `zip(a, b)` and `enumerate(a)`
        (a path zipped with a tensor stays a path), else as what is iterated holds."""
        parts = _iterated_parts(target, iterated)
        if parts is None:
            self.bind(target, self.value_of(iterated)._replace(container=False))
            return
        for element, part in parts:
            if part is None:
                self.bind(element, SCALAR_VALUE)  # enumerate's counter
            else:
                self.bind_iteration(element, part)

    def bind(self, target: cst.BaseExpression, value: Value,
             expression: cst.BaseExpression | None = None) -> None:
        """`target` now holds `value` (the value of `expression`, when there is one)."""
        if isinstance(target, cst.Tuple | cst.List):
            self._bind_elements(target, value, expression)
            return
        if type(target) is cst.Subscript:
            key = receiver_key(target.value)
            if key is not None and value.low and not self.is_buffer(target):
                held = self.held(key) or UNKNOWN_VALUE
                self.env[key] = held.join(value)._replace(container=True)
            return
        container = isinstance(expression, cst.List | cst.ListComp | cst.Dict | cst.Tuple)
        for key in target_keys(target):
            self.env[key] = value._replace(container=container or (value.container
                                                                   and value.low))
            if container:
                self.appended.setdefault(key, [])
            elif value.container and value.low:
                self.appended.pop(key, None)  # a container filled elsewhere

    def _bind_elements(self, target: cst.Tuple | cst.List, value: Value,
                       expression: cst.BaseExpression | None) -> None:
        """`a, b = x, y` element by element; `out, attn = model(x)` by the returned values;
        `values, indices = out.max(1)`: the indices are integers."""
        parts = _elements(expression) if expression is not None else None
        count = len(target.elements)
        returned = self.summary(expression) if type(expression) is cst.Call else None
        indices = type(expression) is cst.Call and views.values_and_indices(_method(expression))
        for position, element in enumerate(target.elements):
            if parts is not None and len(parts) == count:
                part: Value = self.value_of(parts[position])
            elif returned is not None and len(returned) == count:
                part = returned[position]
            elif indices and position == 1:
                part = SCALAR_VALUE
            else:
                # The dtype of an element no expression shows (`action, logp = agent.act(x)`)
                # is unknown: it may be a sample, whose cast must leave integers alone.
                part = value._replace(container=False, integer=value.integer or value.low)
            self.bind(element.value, part)

    def track_append(self, value: cst.BaseExpression) -> None:
        """`outputs.append(out)`: `outputs` now holds a low-precision tensor."""
        if not (type(value) is cst.Call and type(value.func) is cst.Attribute
                and value.func.attr.value in ("append", "extend") and value.args):
            return
        key = receiver_key(value.func.value)
        arg = value.args[0].value
        element = self.value_of(arg)
        if key is None or not element.low:
            return
        self.env[key] = self.env.get(key, UNKNOWN_VALUE).join(element)._replace(container=True)
        if value.func.attr.value == "append" and key in self.appended:
            self.appended[key].append(arg)
        else:
            self.appended.pop(key, None)  # filled in a way one cast cannot reach

    def held(self, key: str | None) -> Value | None:
        """What `key` holds here: bound in this scope, or an attribute of the class stored by
        one of its methods."""
        if key is None:
            return None
        if key in self.env:
            return self.env[key]
        if key.startswith("self.") and self.function is not None:
            cls = self.flow.facts.function_class.get(self.function)
            if cls is not None:
                return self.flow.state(cls).get(key)
        return None

    def is_buffer(self, target: cst.Subscript) -> bool:
        """Whether `target` indexes a float32 tensor rather than a list or dict of values."""
        held = self.held(receiver_key(target.value))
        if self.is_low(target.value) or (held is not None and held.container):
            return False  # a low-precision buffer, or a container of values
        return not all(
            type(e.slice) is cst.Index and type(e.slice.value) is cst.SimpleString
            for e in target.slice
        )  # a string key is a dict entry

    def is_container(self, node: cst.BaseExpression) -> bool:
        """Whether `node` names a list or dict of tensors whose filling no cast reaches."""
        key = receiver_key(node)
        held = self.held(key)
        return held is not None and held.container and not self.appended.get(key or "")

    # Values -------------------------------------------------------------------------------
    def is_low(self, node: cst.BaseExpression | None) -> bool:
        """Whether autocast may have made `node` a low-precision tensor (or container)."""
        return node is not None and self.value_of(node).low

    def value_of(self, node: cst.BaseExpression) -> Value:
        """What `node` may evaluate to here."""
        if id(node) in self.flow.in_region and not self.autocast:  # a forward kept in autocast
            self.autocast = True
            try:
                return self.value_of(node)
            finally:
                self.autocast = False
        held = self.held(receiver_key(node))
        if held is not None:
            return held
        if type(node) is cst.Name:
            return SCALAR_VALUE if node.value in ("True", "False", "None") else UNKNOWN_VALUE
        if type(node) in _NUMBERS or type(node) is cst.Comparison:
            return SCALAR_VALUE  # a number, or a bool tensor: either takes the other's dtype
        if type(node) is cst.Subscript:
            return self._subscript(node)
        if type(node) is cst.Attribute:  # `out.data`, `outputs.logits` of a model output
            if node.attr.value in NOT_TENSOR_ATTRIBUTES:
                return SCALAR_VALUE
            return self.value_of(node.value)._replace(container=False)
        if type(node) is cst.Call:
            return self.call_value(node)
        if type(node) is cst.BinaryOperation:
            return self._binary(node)
        if type(node) is cst.UnaryOperation:
            if type(node.operator) is cst.Not:
                return SCALAR_VALUE
            return self.value_of(node.expression)
        if type(node) is cst.BooleanOperation:
            return self.value_of(node.left).join(self.value_of(node.right))
        if type(node) is cst.IfExp:
            return self.value_of(node.body).join(self.value_of(node.orelse))
        if type(node) is cst.Tuple or type(node) is cst.List:
            return join_all([self.value_of(e.value) for e in node.elements])
        if type(node) is cst.ListComp or type(node) is cst.GeneratorExp:
            return self._comprehension(node)
        return UNKNOWN_VALUE

    def _subscript(self, node: cst.Subscript) -> Value:
        if type(node.value) is cst.Call and views.values_and_indices(_method(node.value)):
            index = node.slice[0].slice
            if type(index) is cst.Index and getattr(index.value, "value", "") == "1":
                return SCALAR_VALUE  # `out.max(1)[1]`: indices
        return self.value_of(node.value)._replace(container=False)

    def _comprehension(self, node: cst.ListComp | cst.GeneratorExp) -> Value:
        saved = dict(self.env)
        clause: cst.CompFor | None = node.for_in
        while clause is not None:
            self.bind_iteration(clause.target, clause.iter)
            clause = clause.inner_for_in
        value = self.value_of(node.elt)
        self.env = saved
        return value

    def _binary(self, node: cst.BinaryOperation) -> Value:
        """Either operand's dtype (type promotion depends on shapes the source does not show);
        under autocast `@` is a matmul (low), and CUDA runs `**` and `1 / x` in float32."""
        left, right = self.value_of(node.left), self.value_of(node.right)
        joined = left.join(right)
        if not self.autocast or not (joined.cpu or joined.cuda):
            return joined
        operator = type(node.operator)
        if operator is cst.MatrixMultiply:
            return LOW_VALUE._replace(integer=joined.integer)
        if operator is cst.Power or (operator is cst.Divide and not (left.cpu or left.cuda)):
            return joined._replace(cuda=FLOAT32)
        return joined

    def call_value(self, call: cst.Call) -> Value:
        func = call.func
        facts, kinds = self.flow.facts, self.flow.kinds
        method = _method(call)
        resolved = facts.imports.resolve(func)
        if resolved is not None:
            module, _, last = resolved.rpartition(".")
            if module.startswith("numpy") or in_array_library(resolved):
                return UNKNOWN_VALUE
            if views.function_not_low(last):
                return self._returned(views.returns_of(last, method=False), call, SCALAR_VALUE)
            if module.startswith(FLOAT32_NAMESPACES) or views.lacks_low_kernel(last):
                return FLOAT32_VALUE  # no low-precision kernel: float32 inputs, or a crash
            if is_loss_call(call, facts, kinds):
                return self._loss(views.function_op(module, last))
            op = views.function_op(module, last)
            args = self._arguments(call)
            if op is not None:
                return self._op_value(op, call, args)
            return args
        if method is not None:
            assert type(func) is cst.Attribute
            return self._method_value(call, func, method)
        if dotted(func) in _SCALAR_BUILTINS:
            return SCALAR_VALUE
        if self.autocast and (dotted(func) in self.layers or _is_indexed_layer(func)):
            return MAYBE_LOW_VALUE  # `for layer in self.layers: layer(x)`, `self.blocks[i](x)`
        summary = self.summary(call)
        if summary is not None:
            return _returned_value(summary)
        if is_loss_call(call, facts, kinds):
            return self._loss(self._module_op(func))
        built = self._module_op(func)
        if built is not None:
            return self._op_value(built, call, self._arguments(call))
        if is_model_call(call, kinds) or _is_layer_call(call):
            return MAYBE_LOW_VALUE if self.autocast else UNKNOWN_VALUE
        return self._arguments(call).join(UNKNOWN_VALUE)

    def _method_value(self, call: cst.Call, func: cst.Attribute, method: str) -> Value:
        """`x.view(...)`, `self.norm(x)`, `model.encode(x)`, `self.helper(x)`."""
        if views.method_not_low(method):
            return self._returned(views.returns_of(method, method=True), call, SCALAR_VALUE)
        module = self._module_op(func)
        if module is not None:
            return self._op_value(module, call, self._arguments(call))
        if is_model_call(call, self.flow.kinds):
            return MAYBE_LOW_VALUE if self.autocast else self._arguments(call).join(
                UNKNOWN_VALUE)
        if _is_layer_call(call) and method in self.flow.by_name:  # `self.helper(...)`
            summary = self.summary(call)
            if summary is not None:
                return _returned_value(summary)
        receiver = self.value_of(func.value)._replace(container=False)
        if self.autocast and _is_layer_call(call):
            return receiver.join(MAYBE_LOW_VALUE)
        if method in ("to", "type"):
            return self._dtype_argument(call, receiver)
        if method == "type_as" and call.args:
            return self.value_of(call.args[0].value)
        op = views.method_op(method)
        if op is not None:
            returned = self._returned(op.returns, call, receiver)
            return self._under_autocast(op, returned) if returned is receiver else returned
        return receiver  # most tensor methods keep the dtype (view, transpose, masked_fill)

    def _module_op(self, func: cst.BaseExpression) -> Op | None:
        """The table's row for a torch.nn module `func` names (`self.proj = nn.Linear(...)`)."""
        built_by = self.flow.kinds.constructors.get(dotted(func) or "", "")
        if not built_by.startswith("torch.nn."):
            return None
        return views.module_op(built_by.removeprefix("torch.nn."))

    def _loss(self, op: Op | None) -> Value:
        """A loss: float32 where autocast runs it so; otherwise unknown (a loss of the file's
        own, or outside autocast, where the float32 casts of its inputs are the uses')."""
        if self.autocast and op is not None and op.cuda is Cast.FLOAT32 \
                and op.cpu is Cast.FLOAT32:
            return FLOAT32_VALUE
        return UNKNOWN_VALUE

    def _arguments(self, call: cst.Call) -> Value:
        return join_all([self.value_of(a.value) for a in call.args])

    def _op_value(self, op: Op, call: cst.Call, args: Value) -> Value:
        """A torch function or module given `args`: what it returns, in the dtype autocast
        gives it on each device."""
        first = call.args[0].value if call.args and call.args[0].keyword is None else None
        if op.returns is Returns.FLOAT32:
            return FLOAT32_VALUE
        if op.returns is Returns.LIKE and first is not None:
            return self._dtype_argument(call, self.value_of(first))
        returned = self._returned(op.returns, call, args)
        return self._under_autocast(op, returned) if returned is args else returned

    def _under_autocast(self, op: Op, inputs: Value) -> Value:
        if not self.autocast:
            return inputs
        return inputs._replace(cpu=_cast(op.cpu, inputs.cpu), cuda=_cast(op.cuda, inputs.cuda))

    def _returned(self, returns: Returns | None, call: cst.Call, inputs: Value) -> Value:
        """What an op returning `returns` gives from `inputs` (a tensor: `inputs` itself)."""
        if returns in (Returns.INTEGER, Returns.NUMBER):
            return SCALAR_VALUE
        if returns in (Returns.OTHER, Returns.COMPLEX):
            return UNKNOWN_VALUE
        if returns is Returns.FLOAT32:
            return FLOAT32_VALUE._replace(container=inputs.container)
        if returns is Returns.LOW:
            return inputs.with_dtype(CAST_LOW)
        if returns is Returns.NEW or returns is Returns.LIKE:
            return self._dtype_argument(call, FLOAT32_VALUE)
        if returns is Returns.MAYBE_INTEGER:
            return inputs._replace(integer=True)
        return inputs

    def _dtype_argument(self, call: cst.Call, otherwise: Value) -> Value:
        """The dtype a `dtype=` (or `.to(dtype)`) argument gives; `otherwise` without one."""
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value != "dtype":
                continue
            resolved = self.flow.facts.imports.resolve(arg.value)
            if resolved in LOW_DTYPES:
                return otherwise.with_dtype(CAST_LOW)
            if resolved in FLOATING_DTYPES:
                return otherwise.with_dtype(FLOAT32)._replace(integer=False)
            if resolved in OTHER_DTYPES:  # an integer or bool tensor takes a float's dtype
                return otherwise.with_dtype(0)._replace(integer=False)
        return otherwise

    def summary(self, call: cst.Call) -> Returned | None:
        """What the module function (or model `forward`) `call` runs returns."""
        name = (dotted(call.func) or "").removeprefix("self.")
        forward = self.flow.model_forwards.get(dotted(call.func) or "")
        if forward is not None:  # its summary assumes autocast: outside it, float32 stays
            running_low = self.autocast or any(self.is_low(a.value) for a in call.args)
            return self.flow.returns(forward, frozenset(), False) if running_low else None
        functions = self.flow.by_name.get(name, [])
        if len(functions) == 1:
            low = self.low_parameters(call, functions[0])
            if low:  # what it returns given these low arguments (`topk` indices stay ints)
                return self.flow.returns(functions[0], low, self.autocast)
        return self.flow.returns_by_name(name)

    def low_parameters(self, call: cst.Call, function: cst.FunctionDef) -> frozenset[str]:
        """The parameters of `function` that `call` binds to low-precision arguments."""
        positional, _ = self.flow.facts.parameters(function)
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

    def saturating_input(self, node: cst.BaseExpression) -> cst.BaseExpression | None:
        """The low-precision input of `torch.tanh(z)`, `z.sigmoid()` (an op whose result rounds
        to ±1 in low precision), when `node` is such a call."""
        if type(node) is not cst.Call:
            return None
        func = node.func
        resolved = self.flow.facts.imports.resolve(func)
        if resolved is not None:
            module, _, name = resolved.rpartition(".")
            positional = [a.value for a in node.args if a.keyword is None and not a.star]
            found = positional[0] if views.saturates(module, name, method=False) \
                and positional else None
        elif type(func) is cst.Attribute and views.saturates("", func.attr.value, method=True) \
                and not node.args:
            found = func.value
        else:
            return None
        return found if found is not None and self.is_low(found) else None

    def in_model_method(self) -> bool:
        """Whether this scope follows a method of one of the file's nn.Module classes."""
        cls = self.flow.facts.function_class.get(self.function) if self.function else None
        return cls is not None and cls in self.flow.models


# Literals that are no tensor: numbers take a tensor's dtype, strings are keys and paths.
_NUMBERS = frozenset({cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString,
                      cst.ConcatenatedString, cst.FormattedString})


def _cast(cast: Cast, bits: int) -> int:
    """The dtype bits of an op's result on one device, from its inputs'."""
    if not bits:
        return bits  # numbers only: no tensor comes out of autocast's cast
    if cast is Cast.LOW:
        return AUTOCAST_LOW
    if cast is Cast.FLOAT32:
        return FLOAT32
    return bits


def _returned_value(returned: Returned) -> Value:
    """A call's value from what its function returns: a container only when it returns one."""
    value = join_all(list(returned))
    return value if len(returned) == 1 else value._replace(container=False)


def _method(call: cst.Call) -> str | None:
    return call.func.attr.value if type(call.func) is cst.Attribute else None


def _is_layer_call(call: cst.Call) -> bool:
    """`self.fc(x)` inside a model: a submodule's forward."""
    return _is_submodule(call.func)


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


def model_classes(facts: ModuleFacts, kinds: KindTable) -> set[cst.ClassDef]:
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


# Module hook registrations -> whether the hook runs in the forward (under its autocast).
_HOOK_REGISTRATIONS = {
    "register_forward_pre_hook": True, "register_forward_hook": True,
    "register_full_backward_hook": False, "register_backward_hook": False,
    "register_full_backward_pre_hook": False,
}
BACKWARD_HOOKS = frozenset(name for name, forward in _HOOK_REGISTRATIONS.items() if not forward)


def _hooks(facts: ModuleFacts, by_name: dict[str, list[cst.FunctionDef]]
           ) -> dict[cst.FunctionDef, bool]:
    """The module's functions registered as module hooks (`layer.register_forward_pre_hook(
    self._save_input)`), each with whether it runs in the forward."""
    hooks: dict[cst.FunctionDef, bool] = {}
    for site in facts.calls:
        func = site.call.func
        if type(func) is not cst.Attribute or func.attr.value not in _HOOK_REGISTRATIONS \
                or not site.call.args:
            continue
        name = (dotted(site.call.args[0].value) or "").removeprefix("self.")
        for function in by_name.get(name, []):
            hooks[function] = _HOOK_REGISTRATIONS[func.attr.value]
    return hooks


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
