"""Each function's statements as the protocol events the checker follows (`ir`): scaler
calls, backwards, steps, zeroing, gradient uses, calls of the module's own functions, inside
the control flow that orders them. Only the lines that may hold an event are read."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator

from amprewrite.protocol import ir
from amprewrite.protocol.api import (
    AUTOCASTS,
    CLIPPING,
    FRAMEWORK_RECEIVERS,
    SCALER_CLASSES,
    SCALER_METHODS,
)
from amprewrite.protocol.keys import key_of, last_name, rebase, root_of
from amprewrite.protocol.outline import bound_names, subnodes, walk_statements
from amprewrite.protocol.program import (
    Program,
    alternatives,
    collection_of_optimizers,
    cond_of,
    is_optimizer_class,
    own_expressions,
    parameter_owners,
    scale_call,
)

_LEAVES = frozenset({ast.Name, ast.Constant, ast.Lambda, ast.Load, ast.Store, ast.Del})
_COMPREHENSIONS = frozenset({ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp})
_GRAD_RESETS = frozenset({"zero_", "detach_", "requires_grad_"})
_CHAINS = frozenset({"list", "tuple", "set", "sorted", "filter", "itertools.chain"})
_TRIES: tuple[type[ast.stmt], ...] = (ast.Try, *([ast.TryStar] if hasattr(ast, "TryStar") else []))


def build(program: Program) -> None:
    """Give every function of `program` its events."""
    for function in list(program.functions.values()):
        node = function.node
        if isinstance(node, ast.Module) or program.interest.any(
                node.lineno, node.end_lineno or node.lineno):
            function.body = Builder(program, function).block(node.body)


class Builder:
    """Turns one function's statements into `ir` nodes."""

    def __init__(self, program: Program, function: ir.Function) -> None:
        self.program = program
        self.function = function
        self.scaled: dict[str, str] = {}  # `scaled = scaler.scale(loss)`: name -> scaler
        self.parameters: dict[str, frozenset[str] | None] = {}  # `for p in m.parameters()`
        self.elements: dict[str, str] = {}  # `for opt in optimizers`: opt -> `optimizers[*]`
        self.assigned: ast.expr | None = None  # the value of the assignment being read
        self.unpacked: ast.expr | None = None  # that value, where a tuple of names takes it
        self.sources: dict[str, list[ast.expr] | None] | None = None  # for `reach`, lazily
        self.loop_names: set[str] = set()  # a loop's names over data (what it iterates)

    def key(self, node: ast.expr) -> str | None:
        """The key of `node`, a loop's element standing for each element of its collection
        (`opt` in `for opt in self.optims.values()`: `self.optims[*]`)."""
        key = key_of(node)
        if key is None:
            return None
        root = root_of(key)
        element = self.elements.get(root)
        key = key if element is None else rebase(key, root, element)
        base, _, attribute = key.rpartition(".")
        if f".{attribute}" in self.program.collections.get(base, ()):
            key = f"{base}[{attribute!r}]"  # `optims.g` is `optims['g']`
        if key.endswith("]") and key not in self.program.optimizers:  # `optimizers[i]`, one
            each = f"{key[:key.rfind('[')]}[*]"  # element of a collection built here
            if each in self.program.optimizers:
                return each
        return key

    # --- statements ---

    def block(self, statements: list[ast.stmt]) -> ir.Block:
        out: list[ir.Node] = []
        for statement in statements:
            out.extend(self.statement(statement))
        return tuple(out)

    def statement(self, statement: ast.stmt) -> list[ir.Node]:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            return []
        if isinstance(statement, ast.Break | ast.Continue):
            return [ir.Jump("break" if isinstance(statement, ast.Break) else "continue")]
        if isinstance(statement, ast.Raise):
            return [ir.Jump("raise")]
        read = self.program.interest.statement(statement)
        if isinstance(statement, ast.Return):
            value = [] if statement.value is None or not read else self.events(statement.value)
            return [*value, ir.Jump("return")]
        if isinstance(statement, ast.If):
            return self._if(statement, read)
        if isinstance(statement, ast.For | ast.AsyncFor):
            each = self._enter_loop(statement.target, statement.iter)
            head = self.events(statement.iter) if read else []
            return [*head, *self._loop(statement.body, statement.orelse, False,
                                       _stored_names(statement.target), each)]
        if isinstance(statement, ast.While):
            endless = isinstance(statement.test, ast.Constant) and bool(statement.test.value)
            head = self.events(statement.test) if read else []
            return [*head, *self._loop(statement.body, statement.orelse, endless, set(), False)]
        if isinstance(statement, ast.With | ast.AsyncWith):
            return self._with(statement, read)
        if isinstance(statement, _TRIES):
            return self._try(statement)  # type: ignore[arg-type]
        if isinstance(statement, ast.Match):
            return self._match(statement, read)
        if not read:
            return []
        if isinstance(statement, ast.Assign | ast.AnnAssign | ast.AugAssign):
            return self._assign(statement)
        out: list[ir.Node] = []
        for part in own_expressions(statement):
            if isinstance(part, ast.expr):
                out.extend(self.events(part))
        return out

    def _if(self, statement: ast.If, read: bool) -> list[ir.Node]:
        head = self.events(statement.test) if read else []
        body, orelse = self.block(statement.body), self.block(statement.orelse)
        test = self.test(statement.test)
        if not body and not orelse:
            return [*head, *self._forget(statement.body + statement.orelse)]
        return [*head, ir.If(test, body, orelse)]

    def _loop(
        self, body: list[ast.stmt], orelse: list[ast.stmt], endless: bool, targets: set[str],
        each: bool,
    ) -> list[ir.Node]:
        """A loop; what each iteration and the loop as a whole assign makes conditions on
        those names stale (at the start of each iteration, and after the loop). `each`: a loop
        over the optimizers or scalers of a collection, taken to run at least once."""
        inner, after = self.block(body), self.block(orelse)
        forget = self._forget(body + orelse, targets)
        if not inner and not after:
            return forget
        return [ir.Loop((*forget, *inner), after, endless, each), *forget]

    def _with(self, statement: ast.With | ast.AsyncWith, read: bool) -> list[ir.Node]:
        out: list[ir.Node] = []
        autocast = False
        for item in statement.items if read else ():
            out.extend(self.events(item.context_expr))
            autocast = autocast or self._is_autocast(item.context_expr)
        body = self.block(statement.body)
        if autocast and body:
            out.append(ir.Autocast(body))
        else:
            out.extend(body)
        return out

    def _try(self, statement: ast.Try) -> list[ir.Node]:
        body = self.block(statement.body)
        handlers = tuple(self.block(h.body) for h in statement.handlers)
        orelse, final = self.block(statement.orelse), self.block(statement.finalbody)
        if not body and not any(handlers) and not orelse and not final:
            return []
        return [ir.Try(body, handlers, orelse, final)]

    def _match(self, statement: ast.Match, read: bool) -> list[ir.Node]:
        out: list[ir.Node] = list(self.events(statement.subject)) if read else []
        bodies = [self.block(case.body) for case in statement.cases]
        if not any(bodies):
            return out
        chain: ir.Block = ()
        for body in reversed(bodies):
            chain = (ir.If(ir.Test(), body, chain),)
        return [*out, *chain]

    def _assign(self, statement: ast.Assign | ast.AnnAssign | ast.AugAssign) -> list[ir.Node]:
        value = statement.value
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        self.assigned = value  # a construction assigned here is bound by `_bind`
        self.unpacked = value if any(isinstance(t, ast.Tuple | ast.List) for t in targets) \
            else None
        out: list[ir.Node] = [] if value is None else list(self.events(value))
        self.assigned = self.unpacked = None
        names: set[str] = set()
        for target in targets:
            names |= _stored_names(target)
            out.extend(self._bind(target, value, isinstance(statement, ast.AugAssign)))
        forget = names & self.program.test_names
        if forget:
            out.append(ir.Forget(frozenset(forget)))
        return out

    def _bind(self, target: ast.expr, value: ast.expr | None, augmented: bool) -> list[ir.Node]:
        if isinstance(target, ast.Tuple | ast.List):
            return [node for element in target.elts for node in self._bind(element, None, False)]
        if isinstance(target, ast.Attribute) and target.attr == "grad":
            reset = isinstance(value, ast.Constant) and value.value is None
            return [ir.Zero(None, target) if reset else
                    ir.GradUse(self._grad_owners(target.value), target)]
        key = key_of(target)
        if key is None:
            return []
        if value is not None and not augmented:
            scaler = scale_call(value)
            if scaler is not None and scaler in self.program.scalers:
                self.scaled[key] = scaler
            else:
                self.scaled.pop(key, None)
            owners = self._owners(value)
            if owners is not None or key in self.parameters:
                self.parameters[key] = owners
            construction = self._construction(value, key)
            if construction is not None:
                return [construction]
            if isinstance(value, ast.Call) and key in self.program.optimizers:
                qualified = self.program.imports.resolve(value.func)
                if is_optimizer_class(qualified, last_name(qualified)):
                    return [ir.Build(key, self._built_over(value))]
            built = collection_of_optimizers(value, self.program)
            if built:  # each element stands for itself (`for opt in optimizers` for them all)
                return [ir.Build(f"{key}{name}", self._built_over(call))
                        for name, call in built.items() if name.startswith("[")]
        if key in self.program.scalers:
            return [ir.Assign(key, ir.UNKNOWN if value is None or augmented
                              else self.value(value))]
        return []

    def _forget(self, statements: list[ast.stmt], extra: set[str] | None = None) -> list[ir.Node]:
        names = set(extra or ())
        for statement in walk_statements(statements):
            names |= bound_names(statement)
        names &= self.program.test_names
        return [ir.Forget(frozenset(names))] if names else []

    # --- values and tests ---

    def value(self, node: ast.expr) -> ir.Value:
        if isinstance(node, ast.Constant) and node.value is None:
            return ir.NONE
        if isinstance(node, ast.IfExp):
            return ir.Choice(self.test(node.test), self.value(node.body), self.value(node.orelse))
        qualified = self.program.imports.resolve(node.func) if isinstance(node, ast.Call) else None
        if isinstance(node, ast.Call) and last_name(qualified) in SCALER_CLASSES:
            level = _opt_level(node) if qualified == "amprewrite_runtime.GradScaler" else None
            return _new_scaler(node) if level is None else self._by_level(level)
        key = key_of(node)
        if key is not None and key in self.program.scalers:
            return ir.Copy(key)
        return ir.UNKNOWN

    def _by_level(self, level: ast.expr) -> ir.Value:
        """The runtime's scaler at an opt level: off at "O0" (`GradScaler("O0" if args.fp16
        else "O1")`), on at a level it cannot read (`GradScaler(args.opt_level)`)."""
        if isinstance(level, ast.IfExp):
            return ir.Choice(self.test(level.test), self._by_level(level.body),
                             self._by_level(level.orelse))
        if isinstance(level, ast.Constant):
            return ir.NewScaler(level.value != "O0")
        return ir.UNKNOWN

    def test(self, node: ast.expr) -> ir.Test:
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return self.test(node.operand).negated()
        if isinstance(node, ast.BoolOp):
            parts = [self.test(value) for value in node.values]
            if isinstance(node.op, ast.And):
                return ir.Test(tuple(a for p in parts for a in p.when_true),
                               parts[0].when_false if len(parts) == 1 else ())
            return ir.Test((), tuple(a for p in parts for a in p.when_false))
        scaler = self._scaler_test(node)
        if scaler is not None:
            return scaler
        if _runs_as_main(node):
            return ir.Test((), (ir.Impossible(),))
        cond = cond_of(node)
        if cond is None:
            return ir.Test()
        return ir.Test((ir.FlagTest(cond, True),), (ir.FlagTest(cond, False),))

    def _scaler_test(self, node: ast.expr) -> ir.Test | None:
        key = key_of(node)
        if key is not None and key in self.program.scalers:
            return ir.Test((ir.ScalerTest(key, False),), (ir.ScalerTest(key, True),))
        if (isinstance(node, ast.Compare) and len(node.ops) == 1
                and isinstance(node.ops[0], ast.Is | ast.IsNot | ast.Eq | ast.NotEq)):
            left, right = node.left, node.comparators[0]
            if isinstance(left, ast.Constant) and left.value is None:
                left, right = right, left
            key = key_of(left)
            if (key in self.program.scalers and isinstance(right, ast.Constant)
                    and right.value is None):
                assert key is not None
                is_none = isinstance(node.ops[0], ast.Is | ast.Eq)
                return ir.Test((ir.ScalerTest(key, is_none),), (ir.ScalerTest(key, not is_none),))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "is_enabled"):
            key = key_of(node.func.value)
            if key in self.program.scalers:
                assert key is not None
                return ir.Test((ir.ScalerTest(key, False, True),),
                               (ir.ScalerTest(key, None, False),))
        return None

    def _is_autocast(self, node: ast.expr) -> bool:
        for candidate in alternatives(node):
            if isinstance(candidate, ast.Call):
                func = candidate.func
                if (self.program.imports.resolve(func) in AUTOCASTS
                        or key_of(func) in self.program.autocast_makers):
                    return not _turned_off(candidate)
            elif key_of(candidate) in self.program.autocast_values:
                return True
        return False

    # --- expressions ---

    def events(self, node: ast.expr) -> list[ir.Node]:
        out: list[ir.Node] = []
        self._visit(node, out)
        return out

    def _visit(self, node: ast.AST, out: list[ir.Node]) -> None:
        """The events of an expression in the order it runs them (arguments before calls)."""
        kind = type(node)
        if kind is ast.Call:
            assert isinstance(node, ast.Call)
            func = node.func
            if type(func) is ast.Attribute and func.attr in _GRAD_RESETS and _on_grad(
                    func.value):
                out.append(ir.Zero(None, node))
                return
            self._visit(func, out)
            for argument in node.args:
                self._visit(argument, out)
            for keyword in node.keywords:
                self._visit(keyword.value, out)
            event = self._call(node)
            if event is not None:
                out.append(event)
            return
        if kind is ast.Attribute:
            assert isinstance(node, ast.Attribute)
            self._visit(node.value, out)
            if (node.attr == "grad" and type(node.ctx) is ast.Load
                    and self.program.imports.resolve(node.value) != "torch.autograd"):
                out.append(ir.GradUse(self._grad_owners(node.value), node))
            return
        if kind in _LEAVES:
            return
        if kind is ast.Compare and _is_none_test(node):  # type: ignore[arg-type]
            assert isinstance(node, ast.Compare)
            for part in (node.left, *node.comparators):
                if not (type(part) is ast.Attribute and part.attr == "grad"):
                    self._visit(part, out)
            return
        if kind in _COMPREHENSIONS:
            for generator in node.generators:  # type: ignore[attr-defined]
                self._enter_loop(generator.target, generator.iter)
        for name in node._fields:
            value = getattr(node, name, None)
            if type(value) is list:
                for item in value:
                    if isinstance(item, ast.AST):
                        self._visit(item, out)
            elif isinstance(value, ast.AST):
                self._visit(value, out)

    def _call(self, call: ast.Call) -> ir.Node | None:
        local = self._local_call(call)
        if local is not None:
            return local
        func = call.func
        qualified = self.program.imports.resolve(func)
        if qualified == "torch.save":
            return ir.Probe(call)
        if qualified == "torch.autograd.backward":
            tensors = call.args[0] if call.args else next(
                (k.value for k in call.keywords if k.arg == "tensors"), None)
            return ir.Backward(self._scaled_by(tensors), call, self.reach(tensors))
        if isinstance(func, ast.Attribute):
            receiver = self.key(func.value)
            method = func.attr
            if method == "backward":
                if receiver is not None and (FRAMEWORK_RECEIVERS.search(receiver)
                                             or self.program.is_optimizer(receiver)):
                    return None  # a framework's or an optimizer's own (apex's FP16_Optimizer)
                if call is self.unpacked:
                    return None  # `z, log_det = flow.backward(z)`: a tensor's returns None
                return ir.Backward(self._scaled_by(func.value), call, self.reach(func.value))
            if receiver is not None and receiver in self.program.scalers:
                if method not in SCALER_METHODS:
                    return None
                target = call.args[0] if call.args else next(
                    (k.value for k in call.keywords if k.arg == "optimizer"), None)
                return ir.ScalerCall(receiver, method, None if target is None
                                     else self.key(target), call)
            if method in ("state_dict", "load_state_dict"):
                return ir.Probe(call)
            if method == "zero_grad":
                known = receiver is not None and self.program.is_optimizer(receiver)
                return ir.Zero(receiver if known else None, call)
            if method == "step" and receiver is not None and self.program.is_optimizer(receiver):
                return ir.Step(receiver, call)
            if method in CLIPPING:
                target = call.args[0] if call.args else None
                if receiver is not None and (target is None or isinstance(target, ast.Constant)):
                    return ir.GradUse(frozenset({receiver}), call)  # FSDP's model.clip_grad_norm_
        if last_name(qualified) in CLIPPING:
            target = call.args[0] if call.args else next(
                (k.value for k in call.keywords if k.arg == "parameters"), None)
            return ir.GradUse(None if target is None else self._owners(target), call)
        return None

    def reach(self, tensor: ast.expr | None) -> frozenset[str] | None:
        """The callables a loss was computed by (`model`, `criterion`, `self.critic`),
        following the function's assignments back from it; None where it depends on what the
        function cannot see (a parameter, a global, a helper of the module)."""
        if tensor is None:
            return None
        if self.sources is None:
            self.sources = _assigned_values(self.function)
        found: set[str] = set()
        seen: set[str] = set()
        todo = [tensor]
        while todo:
            node = todo.pop()
            for part in _data_of(node, found):
                if part == "" or part in self.function.params or part not in self.sources:
                    if part not in self.loop_names:
                        return None
                    continue
                if part not in seen:
                    seen.add(part)
                    values = self.sources[part]
                    if values is None:
                        return None
                    todo.extend(values)
        if any(self._runs_module_code(key) for key in found):
            return None  # a helper of the module: it may run any model
        return frozenset(found)

    def _runs_module_code(self, key: str) -> bool:
        """Whether calling `key` runs a function, class or method of this module."""
        if root_of(key) in self.program.functions or key in self.program.classes:
            return True
        cls = self.function.cls
        return (key.startswith("self.") and cls is not None
                and self.program.method(cls, key[len("self."):]) is not None)

    def _scaled_by(self, tensor: ast.expr | None) -> str | None:
        if tensor is None:
            return None
        if isinstance(tensor, ast.List | ast.Tuple):
            scalers = {self._scaled_by(element) for element in tensor.elts}
            return scalers.pop() if len(scalers) == 1 else None
        scaler = scale_call(tensor)
        if scaler is not None and scaler in self.program.scalers:
            return scaler
        key = self.key(tensor)
        return None if key is None else self.scaled.get(key)

    def _local_call(self, call: ast.Call) -> ir.Node | None:
        """A call of one of the module's functions or methods, with its bindings."""
        func = call.func
        if isinstance(func, ast.Name):
            if func.id in self.program.classes:
                return None if call is self.assigned else self._construction(call, None)
            candidates = (f"{self.function.qualname}.{func.id}" if self.function.qualname
                          else "", self._sibling(func.id), func.id)
            target = next((c for c in candidates if c and c in self.program.functions), None)
            return None if target is None else self._bound_call(target, call, None, False)
        if not isinstance(func, ast.Attribute):
            return None
        base = func.value
        if (isinstance(base, ast.Call) and isinstance(base.func, ast.Name)
                and base.func.id == "super" and self.function.cls is not None):
            for parent in self.program.classes[self.function.cls].bases:
                target = self.program.method(parent, func.attr)
                if target is not None:
                    return self._bound_call(target, call, "self", True)
            return None
        key = key_of(base)
        cls = self._class_of(key)
        if cls is not None:
            target = self.program.method(cls, func.attr)
            return None if target is None else self._bound_call(target, call, key, True)
        if key is not None and key in self.program.classes:  # `Base.method(self, x)`
            target = self.program.method(key, func.attr)
            return None if target is None else self._bound_call(target, call, None, False)
        return None

    def _bound_call(
        self, target: str, call: ast.Call, receiver: str | None, method: bool
    ) -> ir.Call:
        self.function.calls.add(target)
        return ir.Call(target, self._bindings(self.program.functions[target], call, receiver,
                                              method), call)

    def _sibling(self, name: str) -> str:
        parent = self.function.parent
        return f"{parent}.{name}" if parent else ""

    def _class_of(self, key: str | None) -> str | None:
        if key is None:
            return None
        if key == "self":
            return self.function.cls
        return self.program.instances.get(key)

    def _construction(self, value: ast.expr, key: str | None) -> ir.Node | None:
        if not isinstance(value, ast.Call):
            return None
        cls = key_of(value.func)
        if cls is None or cls not in self.program.classes:
            return None
        init = self.program.method(cls, "__init__")
        return None if init is None else self._bound_call(init, value, key, True)

    def _bindings(
        self, callee: ir.Function, call: ast.Call, receiver: str | None, method: bool
    ) -> tuple[tuple[str, str | None], ...]:
        """Each parameter of `callee` and the key of its argument (None: not a key, or not
        given); `method`: the call binds the first parameter to `receiver`."""
        params = list(callee.params)
        bound: dict[str, str | None] = {name: None for name in params}
        if method and params:
            bound[params[0]] = receiver
            params = params[1:]
        for name, argument in zip(params, call.args, strict=False):
            if isinstance(argument, ast.Starred):
                break
            bound[name] = self.key(argument)
        for keyword in call.keywords:
            if keyword.arg is not None and keyword.arg in bound:
                bound[keyword.arg] = self.key(keyword.value)
        return tuple(bound.items())

    def _owners(self, node: ast.expr) -> frozenset[str] | None:
        """Whose gradients an argument holds: `model.parameters()`, a name bound to them,
        `scaler.master_params(opt)`, a chain or list of those."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("parameters", "named_parameters"):
                owner = self.key(node.func.value)
                return None if owner is None else frozenset({owner})
            if node.func.attr == "master_params" and node.args:
                optimizer = self.key(node.args[0])
                return None if optimizer is None else frozenset({f"opt:{optimizer}"})
        if isinstance(node, ast.Call) and self.program.imports.resolve(node.func) in _CHAINS:
            parts = node.args[-1:] if key_of(node.func) == "filter" else node.args
        elif isinstance(node, ast.List | ast.Tuple):
            parts = node.elts
        else:
            parts = None
        if parts is not None:
            owners: set[str] = set()
            for part in parts:
                found = self._owners(part)
                if found is None:
                    return None
                owners |= found
            return frozenset(owners) or None
        if isinstance(node, ast.ListComp | ast.GeneratorExp):
            return self._owners(node.generators[0].iter)
        key = self.key(node)
        if key is None:
            return None
        for known in (key, root_of(key)):
            if known in self.parameters:
                return self.parameters[known]
        if self.program.is_optimizer(key):
            return frozenset({f"opt:{key}"})  # `clip_gradient(optimizer, 5.0)`
        if ".param_groups" in key:
            return frozenset({f"opt:{key.split('.param_groups', 1)[0]}"})
        return None

    def _built_over(self, call: ast.Call) -> frozenset[str] | None:
        """The models an optimizer is built over: its `.parameters()` calls, or what its
        first argument names (`Adam(params)` after `params = model.parameters()`)."""
        explicit = parameter_owners(call, self.program)
        if explicit is not None or not call.args:
            return explicit
        return self._owners(call.args[0])

    def _grad_owners(self, node: ast.expr) -> frozenset[str] | None:
        """Whose parameter `node.grad` is: a model's (`model.fc.weight`, a loop over
        parameters), or a tensor's own (`x_adv.grad`: `tensor:x_adv`, no optimizer's)."""
        key = self.key(node)
        if key is None:
            return None
        for known in (key, root_of(key)):
            if known in self.parameters:
                return self.parameters[known]
        return frozenset({key.rsplit(".", 1)[0] if "." in key else f"tensor:{key}"})

    def _enter_loop(self, target: ast.expr, iterable: ast.expr) -> bool:
        """What a loop's names stand for: parameters (of `model.parameters()`), or each
        element of a collection of keys; whether it goes over optimizers or scalers."""
        names = _stored_names(target)
        self.loop_names |= names
        for name in names:
            self.elements.pop(name, None)
            self.parameters.pop(name, None)
        owners = self._owners(iterable)
        if _iterates_parameters(iterable) or (owners is not None and not any(
                owner.startswith("opt:") for owner in owners)):
            self.parameters.update(dict.fromkeys(names, owners))
            return False
        each = False
        for name, element in _elements(target, iterable, self.key):
            self.elements[name] = element
            each = each or element in self.program.scalers or self.program.is_optimizer(element)
        return each


def _elements(
    target: ast.expr, iterable: ast.expr, key: Callable[[ast.expr], str | None]
) -> Iterator[tuple[str, str]]:
    """Names of a loop target that stand for each element of a collection: `for opt in
    opts`, `.values()`, `.items()`, `enumerate(...)`, `zip(...)`."""
    if isinstance(iterable, ast.Call):
        func, args = iterable.func, iterable.args
        if isinstance(func, ast.Attribute) and func.attr in ("values", "items") and not args:
            owner = key(func.value)
            if owner is None:
                return
            if func.attr == "values" and isinstance(target, ast.Name):
                yield target.id, f"{owner}[*]"
            elif (func.attr == "items" and isinstance(target, ast.Tuple)
                  and len(target.elts) == 2 and isinstance(target.elts[1], ast.Name)):
                yield target.elts[1].id, f"{owner}[*]"
            return
        if isinstance(func, ast.Name) and func.id == "enumerate" and args and isinstance(
                target, ast.Tuple) and len(target.elts) == 2:
            yield from _elements(target.elts[1], args[0], key)
        elif isinstance(func, ast.Name) and func.id == "zip" and isinstance(
                target, ast.Tuple) and len(target.elts) == len(args):
            for element, argument in zip(target.elts, args, strict=True):
                yield from _elements(element, argument, key)
        return
    owner = key(iterable)
    if owner is not None and isinstance(target, ast.Name):
        yield target.id, f"{owner}[*]"


def _assigned_values(function: ir.Function) -> dict[str, list[ast.expr] | None]:
    """What each name of a function is assigned, anywhere in it (None: by a `with` or an
    import, which `reach` cannot follow)."""
    values: dict[str, list[ast.expr] | None] = {}
    for statement in walk_statements(function.node.body):
        if isinstance(statement, ast.Assign | ast.AnnAssign | ast.AugAssign):
            value = statement.value
            targets = statement.targets if isinstance(statement, ast.Assign) else [
                statement.target]
            for target in targets:
                for name in _stored_names(target):
                    known = values.setdefault(name, [])
                    if known is not None and value is not None:
                        known.append(value)
        elif isinstance(statement, ast.With | ast.AsyncWith | ast.Import | ast.ImportFrom):
            for name in bound_names(statement):
                values[name] = None
    return values


def _data_of(node: ast.expr, calls: set[str]) -> Iterator[str]:
    """The names an expression reads as data ("" for what no name gives), the keys of the
    callables it calls going into `calls`."""
    todo: list[ast.AST] = [node]
    while todo:
        current = todo.pop()
        kind = type(current)
        if kind is ast.Call:
            assert isinstance(current, ast.Call)
            key = key_of(current.func)
            if key is None:
                todo.append(current.func)
            else:
                calls.add(key)
            todo.extend(current.args)
            todo.extend(k.value for k in current.keywords)
        elif kind is ast.Name:
            assert isinstance(current, ast.Name)
            yield current.id
        elif kind is ast.Attribute:
            key = key_of(current)  # type: ignore[arg-type]
            if key is not None and key.startswith("self."):
                calls.add(key)  # a module's own parameter or submodule
                continue
            todo.append(current.value)  # type: ignore[attr-defined]
        elif kind is not ast.Lambda:
            todo.extend(ast.iter_child_nodes(current))


def _runs_as_main(node: ast.expr) -> bool:
    return (isinstance(node, ast.Compare) and isinstance(node.left, ast.Name)
            and node.left.id == "__name__" and len(node.ops) == 1
            and isinstance(node.ops[0], ast.Eq) and isinstance(node.comparators[0], ast.Constant)
            and node.comparators[0].value == "__main__")


def _opt_level(call: ast.Call) -> ast.expr | None:
    """The opt level the runtime's `GradScaler(...)` is created at, if given."""
    if call.args and not isinstance(call.args[0], ast.Starred):
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg == "opt_level"), None)


def _new_scaler(call: ast.Call) -> ir.NewScaler:
    for keyword in call.keywords:
        if keyword.arg != "enabled":
            continue
        value = keyword.value
        if isinstance(value, ast.Constant):
            return ir.NewScaler(bool(value.value))
        negated = isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.Not)
        cond = cond_of(value.operand if isinstance(value, ast.UnaryOp) and negated else value)
        return ir.NewScaler(None, cond, negated)
    return ir.NewScaler(True)


def _turned_off(call: ast.Call) -> bool:
    return any(k.arg == "enabled" and isinstance(k.value, ast.Constant) and not k.value.value
               for k in call.keywords)


def _is_none_test(node: ast.Compare) -> bool:
    return (all(isinstance(op, ast.Is | ast.IsNot) for op in node.ops)
            and any(isinstance(c, ast.Constant) and c.value is None
                    for c in (node.left, *node.comparators)))


def _on_grad(node: ast.expr) -> bool:
    """`p.grad` or `p.grad.data`: the receiver of a reset (`p.grad.zero_()`)."""
    while isinstance(node, ast.Attribute):
        if node.attr == "grad":
            return True
        node = node.value
    return False


def _iterates_parameters(node: ast.expr) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr in ("parameters", "named_parameters",
                                                           "param_groups")
               for n in subnodes(node))


def _stored_names(target: ast.expr) -> set[str]:
    return {n.id for n in subnodes(target) if isinstance(n, ast.Name)}
