"""Constants that float16 cannot hold, in code that runs under autocast.

Under CUDA autocast a matmul's output is float16, and `scores.masked_fill(mask, -1e9)` on it
raises "value cannot be converted to type c10::Half without overflow"; `x.clamp(min=1e-8)`
clamps at zero (1e-8 rounds to 0 in float16) and `log` of it gives -inf. The code searched is
the statements of the autocast regions and the methods of the file's model classes that a
region runs (`forward` and the methods it calls).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis.dtype.flow import Flow, Scope
from amprewrite.analysis.dtype.value import Precision
from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.forward import is_model_call
from amprewrite.analysis.kinds import Kind, KindTable
from amprewrite.analysis.literals import (
    module_constants,
    numeric_value,
    overflows_float16,
    underflows_float16,
)
from amprewrite.analysis.names import dotted, duplicable, walk
from amprewrite.analysis.training_step import Note, Region
from amprewrite.analysis.tree import descendants
from amprewrite.catalog import SKIP, declare

FILL_NOT_FITTED = declare(
    "AMP142", SKIP, "fill value float16 cannot hold, not rewritten",
    "The filled tensor is not a plain name (or torch is not imported by name): assign it to a "
    "name and fill with `torch.finfo(name.dtype).min`.",
    why=(
        "A fill value float16 cannot hold fills a tensor that is not a plain name (or "
        "torch is not imported by name), so `torch.finfo(x.dtype).min` cannot be written."
    ),
    example=(
        "self.scores[mask] = -1e9\n"
        "# write: scores = self.scores; scores[mask] = torch.finfo(scores.dtype).min"
    ),
)

CONSTANT_OUT_OF_RANGE = declare(
    "AMP143", SKIP, "constant outside float16's range in low-precision code",
    "A clamp bound or epsilon below 6.1e-5 vanishes on a float16 tensor (`x.clamp(min=1e-8)` "
    "clamps at 0, `log` of it is -inf), a clamp bound above 65504 raises, a factor above 65504 "
    "overflows: compute it after `.float()` or pick a value float16 holds.",
    why=(
        "A constant outside float16's range (an epsilon below 6.1e-5, a bound or factor "
        "above 65504) meets a value computed under autocast."
    ),
    example="y = torch.log(x.clamp(min=1e-8))   # 1e-8 is 0 in float16",
)

_FILL_METHODS = {"masked_fill": 1, "masked_fill_": 1, "fill_": 0, "new_full": 1}  # value's position
_FILL_FUNCTIONS = {"masked_fill": 2, "full_like": 1}  # torch.<name>(tensor, ..., value)
_CLAMPS = frozenset({"clamp", "clamp_", "clip", "clip_", "clamp_min", "clamp_min_", "clamp_max",
                     "clamp_max_"})
_SAME_MODEL = frozenset({"to", "cuda", "cpu", "float", "double", "train", "eval"})


@dataclass(frozen=True)
class Fill:
    """A fill of `tensor` with `value`, a constant float16 cannot hold."""

    value: cst.BaseExpression  # the constant, to replace
    tensor: cst.BaseExpression  # the tensor whose dtype bounds the fill
    negative: bool
    certain: bool  # the tensor is float16 under autocast (not only possibly)


@dataclass
class Float16Constants:
    fills: list[Fill] = field(default_factory=list)  # to replace by torch.finfo(...).min/max
    notes: list[Note] = field(default_factory=list)  # risky constants reported, not changed


def float16_constants(flow: Flow, regions: list[Region]) -> Float16Constants:
    """The fills and constants float16 cannot hold in the regions' statements and in the
    functions they run."""
    found = Float16Constants()
    if not regions:
        return found
    finder = _Finder(flow.facts, found, module_constants(flow.facts))
    for function in _functions_of(regions, flow.facts):
        flow.follow(function, finder)  # checked where a region makes the scope autocast
    for function in functions_run(regions, flow.facts, flow.kinds):
        flow.follow(function, finder, autocast=True)
    return found


def _functions_of(regions: list[Region], facts: ModuleFacts) -> list[cst.FunctionDef | None]:
    functions: list[cst.FunctionDef | None] = []
    for region in regions:
        if region.statements:
            function = facts.statements[region.statements[0]].function
            if function not in functions:
                functions.append(function)
    return functions


class _Finder:
    """The dtype flow's `Uses` hook: checks each line that runs under autocast, once."""

    def __init__(self, facts: ModuleFacts, found: Float16Constants,
                 constants: dict[str, float]) -> None:
        self.facts = facts
        self.found = found
        self.constants = constants
        self.seen: set[int] = set()

    def _checked(self, scope: Scope, node: cst.CSTNode) -> bool:
        """Whether `node` is to be checked now: under autocast, in a line, not seen before."""
        if not scope.autocast or type(scope.statement) is not cst.SimpleStatementLine \
                or id(node) in self.seen:
            return False
        self.seen.add(id(node))
        return True

    def expression(self, scope: Scope, node: cst.CSTNode) -> None:
        if not self._checked(scope, node):
            return
        for child in walk(node):
            if isinstance(child, cst.Call):
                self._check_call(child, scope)
            elif isinstance(child, cst.BinaryOperation):
                self._check_arithmetic(child, scope)

    def store(self, scope: Scope, target: cst.BaseExpression,
              value: cst.BaseExpression) -> None:
        # `scores[mask] = -1e9`; a dict or a list takes subscripts too: float16 only
        if isinstance(target, cst.Subscript) and self._checked(scope, target) \
                and scope.value_of(target.value).on_cuda() is Precision.LOW:
            self._fill(target.value, value, scope)

    def _value(self, node: cst.BaseExpression) -> float | None:
        return numeric_value(node, self.constants)

    def _check_call(self, call: cst.Call, scope: Scope) -> None:
        func = call.func
        resolved = self.facts.imports.resolve(func) or ""
        name = resolved.removeprefix("torch.") if resolved.startswith("torch.") else None
        if name in _FILL_FUNCTIONS and not _has_keyword(call, "dtype") and call.args:
            value = _argument(call, _FILL_FUNCTIONS[name], "value")
            if value is not None:
                self._fill(call.args[0].value, value, scope)
        elif name == "where" and len(call.args) == 3:
            first, second = call.args[1].value, call.args[2].value
            if self._value(first) is None:
                self._fill(first, second, scope)
            elif self._value(second) is None:
                self._fill(second, first, scope)
        elif name in ("clamp", "clip") and call.args:
            self._check_clamp(call, call.args[0].value, scope, 1)
        elif name is None and isinstance(func, cst.Attribute):
            method = func.attr.value
            if method in _FILL_METHODS and not _has_keyword(call, "dtype"):
                value = _argument(call, _FILL_METHODS[method], "value")
                if value is not None:
                    self._fill(func.value, value, scope)
            elif method in _CLAMPS:
                self._check_clamp(call, func.value, scope, 0)

    def _fill(self, tensor: cst.BaseExpression, value: cst.BaseExpression,
              scope: Scope) -> None:
        number = self._value(value)
        if number is None or not overflows_float16(number):
            return
        precision = scope.value_of(tensor).on_cuda()
        if precision in (Precision.FLOAT32, Precision.SCALAR):
            return
        if duplicable(tensor):
            self.found.fills.append(Fill(value, tensor, number < 0, precision is Precision.LOW))
        else:
            text = self.facts.module.code_for_node(value)
            self.found.notes.append(Note(FILL_NOT_FITTED, value, f"`{text}` does not fit float16 "
                                         "(largest 65504) and this fill may run in float16 under "
                                         "autocast; assign the tensor to a name and fill with "
                                         "`torch.finfo(name.dtype).min`"))

    def _check_clamp(self, call: cst.Call, tensor: cst.BaseExpression,
                     scope: Scope, first: int) -> None:
        precision = scope.value_of(tensor).on_cuda()
        if precision in (Precision.FLOAT32, Precision.SCALAR):
            return
        bounds = [a.value for a in call.args[first:first + 2] if a.keyword is None]
        bounds += [a.value for a in call.args if a.keyword is not None
                   and a.keyword.value in ("min", "max")]
        for bound in bounds:
            number = self._value(bound)
            if number is None:
                continue
            text = self.facts.module.code_for_node(bound)
            if overflows_float16(number):
                self._note(bound, f"clamp bound `{text}` does not fit float16 (largest 65504): "
                           "the clamp raises on a float16 tensor under autocast; use "
                           "`torch.finfo(x.dtype).min/.max` or clamp after `.float()`")
            elif underflows_float16(number) and precision is Precision.LOW:
                self._note(bound, f"clamp bound `{text}` is below float16's smallest normal "
                           "(6.1e-5) and this tensor is float16 under autocast: it clamps at "
                           "(nearly) zero; clamp after `.float()` or use a larger epsilon")

    def _check_arithmetic(self, node: cst.BinaryOperation, scope: Scope) -> None:
        operator = node.operator
        if not isinstance(operator, cst.Add | cst.Subtract | cst.Multiply | cst.Divide):
            return
        number = self._value(node.right)
        tensor = node.left
        if number is None and isinstance(operator, cst.Add | cst.Multiply):
            number, tensor = self._value(node.left), node.right
        if number is None or scope.value_of(tensor).on_cuda() is not Precision.LOW:
            return
        text = self.facts.module.code_for_node(node.right if tensor is node.left else node.left)
        if isinstance(operator, cst.Add | cst.Subtract) and underflows_float16(number):
            self._note(node, f"`{text}` is below float16's smallest normal (6.1e-5): adding it "
                       "to a float16 tensor changes nothing (a zero stays zero); add it after "
                       "`.float()` or use a larger epsilon")
        elif isinstance(operator, cst.Multiply | cst.Divide) and overflows_float16(number):
            effect = "overflows to inf" if isinstance(operator, cst.Multiply) else "underflows"
            self._note(node, f"`{text}` does not fit float16 (largest 65504): the float16 result "
                       f"{effect}; compute it after `.float()`")

    def _note(self, node: cst.CSTNode, message: str) -> None:
        self.found.notes.append(Note(CONSTANT_OUT_OF_RANGE, node, message))


def _argument(call: cst.Call, position: int, keyword: str) -> cst.BaseExpression | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg.value
    positional = [a for a in call.args if a.keyword is None and not a.star]
    return positional[position].value if position < len(positional) else None


def _has_keyword(call: cst.Call, keyword: str) -> bool:
    return any(a.keyword is not None and a.keyword.value == keyword for a in call.args)


# Code a region runs ----------------------------------------------------------------------------
def functions_run(regions: list[Region], facts: ModuleFacts, kinds: KindTable
                   ) -> Iterator[cst.FunctionDef]:
    """The functions whose whole body runs under autocast: `forward` of each model class a
    region runs (and of the classes those build; every model class of the file when a model's
    class is unknown), the methods of those classes a region calls on a model
    (`self.actor.sample_normal(state)`), and the methods and module functions those and the
    regions call."""
    functions = {f.name.value: f for f in facts.functions if f not in facts.function_class}
    classes = _model_classes_run(regions, facts, kinds)
    pending = _methods(classes, facts, {"forward", *_model_methods_called(regions, kinds)})
    for region in regions:
        for statement in region.statements:
            pending.extend(_local_callees(statement, functions, {}))
    yield from _with_callees(pending, functions, facts)


def _model_methods_called(regions: list[Region], kinds: KindTable) -> set[str]:
    """The names of the methods the regions call on a model (`model.encode(x)`)."""
    return {call.func.attr.value for region in regions for statement in region.statements
            for call in walk(statement)
            if type(call) is cst.Call and type(call.func) is cst.Attribute
            and is_model_call(call, kinds) and kinds.of_expr(call.func) is not Kind.MODEL}


def model_module_fills(flow: Flow) -> Float16Constants:
    """In a module with nothing to rewrite that defines models (a project's `models.py`),
    the fills float16 cannot hold in their forward passes: those run under the autocast of a
    training script elsewhere. `torch.finfo(x.dtype).min` is right in every dtype."""
    found = Float16Constants()
    classes = flow.kinds.model_classes()
    if not classes:
        return found
    finder = _Finder(flow.facts, found, module_constants(flow.facts))
    for function in model_module_forwards(flow.facts, classes):
        flow.follow(function, finder, autocast=True)
    return Float16Constants(fills=found.fills)


def model_module_forwards(facts: ModuleFacts, classes: list[cst.ClassDef]
                          ) -> Iterator[cst.FunctionDef]:
    """The `forward` of each of the model `classes`, and the methods and module functions
    they call: what a training script elsewhere runs under its autocast."""
    functions = {f.name.value: f for f in facts.functions if f not in facts.function_class}
    yield from _with_callees(_methods(classes, facts, {"forward"}), functions, facts)


def _methods(classes: list[cst.ClassDef], facts: ModuleFacts, names: set[str]
             ) -> list[cst.FunctionDef]:
    """The methods of `classes` named one of `names`."""
    return [f for f in facts.functions
            if f.name.value in names and facts.function_class.get(f) in classes]


def _with_callees(
    pending: list[cst.FunctionDef], functions: dict[str, cst.FunctionDef], facts: ModuleFacts
) -> Iterator[cst.FunctionDef]:
    """`pending` and the methods and module functions they call, each once."""
    done: set[int] = set()
    while pending:
        function = pending.pop()
        if id(function) in done:
            continue
        done.add(id(function))
        yield function
        cls = facts.function_class.get(function)
        methods = {f.name.value: f for f in facts.functions
                   if cls is not None and facts.function_class.get(f) is cls}
        pending.extend(_local_callees(function.body, functions, methods))


def _model_classes_run(regions: list[Region], facts: ModuleFacts, kinds: KindTable
                       ) -> list[cst.ClassDef]:
    """The model classes of this file whose `forward` a region runs, with the classes they
    build and derive from."""
    classes = {c.name.value: c for c in kinds.model_classes()}
    pending = _classes_called(regions, facts, kinds, classes)
    done: dict[str, cst.ClassDef] = {}
    while pending:
        name = pending.pop()
        if name in done:
            continue
        cls = done[name] = classes[name]
        if _runs_injected_submodule(cls):
            return list(classes.values())  # a submodule of unknown class: every class may run
        pending.extend(name for name in map(dotted, (b.value for b in cls.bases))
                       if name is not None and name in classes)
        pending.extend(c for c in _classes_built(cls) if c in classes)
    return list(done.values())


def _runs_injected_submodule(cls: cst.ClassDef) -> bool:
    """Whether `cls` calls a submodule it was given rather than built (`self.attn = attn` in
    `__init__`, then `self.attn(x)`), as models assembled by a factory do."""
    built: set[str] = set()
    called: set[str] = set()
    for node in descendants(cls.body):
        if isinstance(node, cst.Assign) and isinstance(node.value, cst.Call):
            built.update(dotted(t.target) or "" for t in node.targets)
        elif isinstance(node, cst.Call):
            name = dotted(node.func) or ""
            if name.startswith("self.") and name.count(".") == 1:
                called.add(name)
    methods = {f"self.{n.name.value}" for n in cls.body.body if isinstance(n, cst.FunctionDef)}
    return bool(called - built - methods)


def _local_callees(node: cst.CSTNode, functions: dict[str, cst.FunctionDef],
                   methods: dict[str, cst.FunctionDef]) -> Iterator[cst.FunctionDef]:
    """The module functions (`attention(q, k, v)`) and methods (`self.scores(q, k)`) of this
    file that `node` calls."""
    for call in walk(node):
        if not isinstance(call, cst.Call):
            continue
        name = dotted(call.func) or ""
        callee = methods.get(name.removeprefix("self.")) if name.startswith(
            "self.") else functions.get(name)
        if callee is not None:
            yield callee


def _classes_called(regions: list[Region], facts: ModuleFacts, kinds: KindTable,
                    classes: dict[str, cst.ClassDef]) -> list[str]:
    builders: dict[str, str | None] = {}
    for binding in facts.bindings:
        if len(binding.keys) == 1:
            built = _built_class(binding.value)
            if built in classes or binding.keys[0] not in builders:
                builders[binding.keys[0]] = built
    called: list[str] = []
    for region in regions:
        for statement in region.statements:
            for node in walk(statement):
                if not isinstance(node, cst.Call):
                    continue
                func = node.func
                if isinstance(func, cst.Attribute) and func.attr.value == "forward":
                    key = dotted(func.value)  # `model.forward(x)`: the model's forward too
                elif is_model_call(node, kinds):
                    key = dotted(func) if kinds.of_expr(func) is Kind.MODEL else dotted(
                        func.value) if isinstance(func, cst.Attribute) else None
                else:
                    continue
                built = builders.get(key or "")
                if built not in classes:
                    return list(classes)  # a model of unknown class: every class may run
                called.append(built)
    return called


def _built_class(value: cst.BaseExpression) -> str | None:
    """`Net` for `Net(...)`, `Net(...).to(device)`."""
    while (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)
           and value.func.attr.value in _SAME_MODEL):
        value = value.func.value
    return dotted(value.func) if isinstance(value, cst.Call) else None


def _classes_built(cls: cst.ClassDef) -> Iterator[str]:
    for node in descendants(cls.body):
        if isinstance(node, cst.Call):
            name = dotted(node.func)
            if name is not None:
                yield name
