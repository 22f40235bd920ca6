"""What each key stands for: optimizer, LR scheduler, model or loss criterion.

Kinds come from construction (`torch.optim.SGD(...)`, a local `nn.Module` subclass, names
imported from torch.optim, common third-party libraries), from use (`.parameters()` handed to
an optimizer, `.eval()`, `.zero_grad()` with `.step()`, the first argument of a scheduler) and
from arguments passed to a function's parameters at its call sites in the same module.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.names import dotted, receiver_key
from amprewrite.analysis.tree import descendants


class Kind(str, Enum):
    OPTIMIZER = "optimizer"
    SCHEDULER = "scheduler"
    MODEL = "model"
    CRITERION = "criterion"


_OPTIMIZER_PREFIXES = (
    "torch.optim.",
    "apex.optimizers.",
    "bitsandbytes.optim.",
    "bnb.optim.",
    "torch_optimizer.",
    "timm.optim.",
    "deepspeed.ops.adam.",
    "deepspeed.ops.lamb.",
)
_OPTIMIZER_NAMES = frozenset({
    "transformers.AdamW",
    "transformers.Adafactor",
    "transformers.optimization.AdamW",
    "transformers.optimization.Adafactor",
    "lion_pytorch.Lion",
    "torch.distributed.optim.ZeroRedundancyOptimizer",
})
_SCHEDULER_PREFIXES = (
    "torch.optim.lr_scheduler.",
    "timm.scheduler.",
    "torch.optim.swa_utils.SWALR",
)
_MODEL_NAMES = frozenset({
    "torch.nn.DataParallel",
    "torch.nn.parallel.DataParallel",
    "torch.nn.parallel.DistributedDataParallel",
    "torch.distributed.fsdp.FullyShardedDataParallel",
    "torch.compile",
    "timm.create_model",
})
_MODEL_PREFIXES = ("torchvision.models.", "timm.models.")
# Capitalised names under torch.nn that build no module whose call is a forward pass: a
# parameter or buffer (`self.w = nn.Parameter(...)`: `self.w.copy_(...)` is not a model
# call), their containers, and the helper packages' classes (`PackedSequence`, `SDPBackend`).
_NOT_MODULES = frozenset({"Parameter", "UninitializedParameter", "UninitializedBuffer",
                          "Buffer", "ParameterList", "ParameterDict"})
_NOT_MODULE_PREFIXES = ("torch.nn.utils.", "torch.nn.attention.", "torch.nn.init.",
                        "torch.nn.functional.")
# Framework calls that hand back the object they wrap.
_WRAPPERS = {"wrap_model": Kind.MODEL, "prepare_model": Kind.MODEL,
             "wrap_optimizer": Kind.OPTIMIZER, "prepare_optimizer": Kind.OPTIMIZER}
# Methods that return the receiver itself (or a module of the same kind).
_SAME_KIND_METHODS = frozenset({"to", "cuda", "cpu", "float", "double", "train", "eval",
                                "requires_grad_", "share_memory"})


def kind_of_constructor(name: str) -> Kind | None:
    """The kind of what a qualified callable builds (`torch.optim.AdamW` -> optimizer)."""
    return _classify_qualified(name)


def _classify_qualified(name: str) -> Kind | None:
    last = name.rsplit(".", 1)[-1]
    if name.startswith(_SCHEDULER_PREFIXES) or (
        "schedule" in last and name.startswith("transformers.")
    ):
        return Kind.SCHEDULER
    if name in _OPTIMIZER_NAMES or (name.startswith(_OPTIMIZER_PREFIXES) and last[:1].isupper()):
        return Kind.OPTIMIZER
    if name.startswith(_OPTIMIZER_PREFIXES) and "optimizer" in last:
        return Kind.OPTIMIZER  # factories: timm.optim.create_optimizer_v2
    if (name.startswith("torch.nn.") and last[:1].isupper() and last not in _NOT_MODULES
            and not name.startswith(_NOT_MODULE_PREFIXES)):
        return Kind.CRITERION if last.endswith("Loss") else Kind.MODEL
    if name in _MODEL_NAMES or name.startswith(_MODEL_PREFIXES) or last == "from_pretrained":
        return Kind.MODEL
    return None


_BUILDER_PREFIXES = ("build", "create", "get", "make", "init", "setup", "configure", "load", "new")


def _classify_local_callable(name: str) -> Kind | None:
    """A class or builder (`build_optimizer`, `create_model`) the script defines or imports:
    judge by its name. Other functions (`F.mse_loss`) compute values, not objects."""
    last = name.rsplit(".", 1)[-1]
    if not (last[:1].isupper() or last.lower().startswith(_BUILDER_PREFIXES)):
        return None
    return kind_from_name(last)


# What a name says an object is, for objects whose construction is not visible: the one table
# every analysis guesses from, tried in this order.
_NAME_HINTS: tuple[tuple[Kind, Callable[[str], bool]], ...] = (
    (Kind.SCHEDULER, lambda name: "sched" in name),
    (Kind.OPTIMIZER, lambda name: "optim" in name or name in {"opt", "optimiser"}
     or name.startswith("opt_")),
    (Kind.CRITERION, lambda name: "criterion" in name or name.endswith("loss")),
    (Kind.MODEL, lambda name: "model" in name or name in {"net", "network"}),
)
RECEIVER_KINDS = (Kind.SCHEDULER, Kind.OPTIMIZER)  # what a `.step()` receiver's name may say
# Mappings whose items are also attributes (`optims.generator` is `optims["generator"]`).
_ATTRIBUTE_CONTAINERS = frozenset({
    "EasyDict", "edict", "AttrDict", "AttributeDict", "SimpleNamespace", "Munch", "munchify",
    "DefaultMunch", "Box", "DotMap", "DotDict", "dotdict", "ConfigDict",
})
_MAPPING_METHODS = frozenset({
    "values", "items", "keys", "get", "pop", "popitem", "update", "setdefault", "copy",
    "clear", "toDict", "to_dict", "__dict__",
})


def kind_from_name(name: str | None, among: tuple[Kind, ...] = tuple(Kind)) -> Kind | None:
    """The kind the last part of a dotted name suggests (`lr_scheduler`, `opt_g`,
    `criterion`, `net`), among `among`; None when it suggests none."""
    if name is None:
        return None
    last = name.rsplit(".", 1)[-1].lower()
    return next((kind for kind, hint in _NAME_HINTS if kind in among and hint(last)), None)


class KindTable:
    """The kind of every key the module lets us infer."""

    def __init__(
        self, facts: ModuleFacts, project_kinds: Callable[[str], Kind | None] | None = None
    ) -> None:
        self.facts = facts
        # What a project function imported from another module returns, by the qualified
        # name this module calls it by (`util.make_solver` -> optimizer); None: one file.
        self.project_kinds = project_kinds
        self.kinds: dict[str, Kind] = {}
        self.constructors: dict[str, str] = {}  # key -> qualified name of what built it
        self._local_classes = self._local_class_kinds()
        self._function_names = {f.name.value for f in facts.functions}
        self.element_kinds: dict[str, Kind] = {}  # container key -> kind of its elements
        # `optims = EasyDict(...)` -> the kind of what `optims.generator` holds
        self.attribute_containers: dict[str, Kind] = {}
        # id(for) -> {optimizer variable: (`container[*]`, what to iterate for its elements)}
        self.loop_elements: dict[int, dict[str, tuple[str, str]]] = {}
        for _ in range(4):  # a few rounds reach a fixpoint on real scripts
            before = dict(self.kinds)
            self._from_bindings()
            self._from_uses()
            self._from_call_sites()
            self._from_loops()
            if before == self.kinds:
                break

    def of(self, key: str | None) -> Kind | None:
        if key is None:
            return None
        kind = self.kinds.get(key)
        if kind is None and self.attribute_containers and "." in key:
            container, attribute = key.rsplit(".", 1)
            if attribute not in _MAPPING_METHODS:
                return self.attribute_containers.get(container)
        return kind

    def of_expr(self, node: cst.BaseExpression) -> Kind | None:
        return self.of(receiver_key(node))

    def is_optimizer(self, node: cst.BaseExpression) -> bool:
        """Whether `node` is an optimizer: by its kind, else by what its name says."""
        kind = self.of_expr(node)
        if kind is not None:
            return kind is Kind.OPTIMIZER
        return kind_from_name(receiver_key(node), RECEIVER_KINDS) is Kind.OPTIMIZER

    def _set(self, key: str | None, kind: Kind | None) -> None:
        if key is not None and kind is not None:
            self.kinds.setdefault(key, kind)

    # Construction ---------------------------------------------------------------------------
    def _local_class_kinds(self) -> dict[str, Kind]:
        kinds: dict[str, Kind] = {}
        for _ in range(3):
            for cls in self.facts.classes:
                for base in cls.bases:
                    resolved = self.facts.imports.resolve(base.value)
                    kind = _classify_qualified(resolved) if resolved else None
                    if resolved == "torch.optim.Optimizer" or (
                        resolved and resolved.startswith("torch.optim.") and kind is Kind.OPTIMIZER
                    ):
                        kind = Kind.OPTIMIZER
                    if kind is None:
                        kind = kinds.get(dotted(base.value) or "")
                    if kind in (Kind.MODEL, Kind.OPTIMIZER, Kind.CRITERION):
                        kinds.setdefault(cls.name.value, kind)
        return kinds

    def model_classes(self) -> list[cst.ClassDef]:
        """The module's classes whose instances are models (`nn.Module` subclasses, and
        classes derived from them)."""
        return [cls for cls in self.facts.classes
                if self.kind_of_value(cst.Call(cst.Name(cls.name.value))) is Kind.MODEL]

    def kind_of_value(self, value: cst.BaseExpression) -> Kind | None:
        """The kind of what an expression evaluates to, as far as it can be told."""
        if isinstance(value, cst.Call):
            func = value.func
            if isinstance(func, cst.Attribute) and func.attr.value in _WRAPPERS:
                return _WRAPPERS[func.attr.value]  # Determined / Ray `context.wrap_model(...)`
            resolved = self.facts.imports.resolve(func)
            if resolved is not None:
                kind = _classify_qualified(resolved)
                if kind is Kind.MODEL and resolved.rsplit(".", 1)[-1] in {
                    "DataParallel", "DistributedDataParallel", "FullyShardedDataParallel", "compile"
                }:
                    return Kind.MODEL
                if kind is not None:
                    return kind
            name = dotted(func)
            if name in self._local_classes:
                return self._local_classes[name]
            if isinstance(func, cst.Attribute) and func.attr.value in _SAME_KIND_METHODS:
                return self.kind_of_value(func.value)
            if self.project_kinds is not None:
                qualified = self.facts.imports.resolve_in_project(func)
                kind = self.project_kinds(qualified) if qualified is not None else None
                if kind is not None:
                    return kind
            if resolved is not None:
                return _classify_local_callable(resolved)
            if name in self._function_names:
                return _classify_local_callable(name)
            return None  # calling a variable (a model's forward, a loss function): a result
        if isinstance(value, cst.IfExp):  # `Adam(...) if fine_tune else None`
            return self.kind_of_value(value.body) or self.kind_of_value(value.orelse)
        return self.of_expr(value)

    def _from_bindings(self) -> None:
        for binding in self.facts.bindings:
            value = binding.value
            if (isinstance(value, cst.Tuple | cst.List) and len(binding.keys) > 1
                    and len(value.elements) == len(binding.keys)
                    and not any(isinstance(e, cst.StarredElement) for e in value.elements)):
                for key, element in zip(binding.keys, value.elements, strict=True):
                    self._set(key, self.kind_of_value(element.value))  # `q1, q2 = Q(), Q()`
                continue
            if len(binding.keys) != 1:
                continue
            self._attribute_container(binding.keys[0], binding.value)
            self._set(binding.keys[0], self.kind_of_value(binding.value))
            if isinstance(binding.value, cst.Call):
                built_by = self.facts.imports.resolve(binding.value.func)
                if built_by is not None:
                    self.constructors.setdefault(binding.keys[0], built_by)

    def _attribute_container(self, key: str, value: cst.BaseExpression) -> None:
        """`optims = EasyDict(generator=Adam(...), ...)` (an AttrDict, SimpleNamespace, Munch,
        Box): what its attributes hold, from the constructor's arguments, else from what is
        stored into it (`self.optims[name] = Adam(...)` in a loop over the nets)."""
        if not isinstance(value, cst.Call) or (dotted(value.func) or "").rsplit(".", 1)[
                -1] not in _ATTRIBUTE_CONTAINERS:
            return
        held = {self.kind_of_value(arg.value) for arg in value.args if arg.keyword is not None}
        held |= {self.kind_of_value(e.value) for arg in value.args if arg.keyword is None
                 and isinstance(arg.value, cst.Dict) for e in arg.value.elements
                 if isinstance(e, cst.DictElement)}
        if not held:
            stored = self.kinds.get(key)  # `optims[name] = Adam(...)` marks the container
            held = {stored} if stored is not None else set()
        if len(held) == 1 and (kind := held.pop()) is not None:
            self.attribute_containers.setdefault(key, kind)

    # Containers of optimizers ---------------------------------------------------------------
    def _from_loops(self) -> None:
        """`for opt in optimizers:`, `zip(optimizers, schedulers)`, `self.optimizers.values()`,
        comprehensions: the loop variable is an optimizer when the container holds them."""
        for binding in self.facts.bindings:
            if len(binding.keys) == 1 and self._element_kind(binding.value) is Kind.OPTIMIZER:
                self.element_kinds.setdefault(binding.keys[0], Kind.OPTIMIZER)
        for loop in self.facts.loops:
            elements = {}
            for name, container, iterate in _loop_pairs(loop.target, loop.iter):
                key = receiver_key(container)
                if key is not None and self._holds_optimizers(key):
                    code = self.facts.one_line(iterate)
                    elements[name] = (f"{key}[*]", code)
                    self._set(name, Kind.OPTIMIZER)
            if elements:
                self.loop_elements[id(loop)] = elements

    def _holds_optimizers(self, key: str) -> bool:
        if key in self.element_kinds:
            return self.element_kinds[key] is Kind.OPTIMIZER
        last = key.rsplit(".", 1)[-1].lower()
        return last.startswith(("optimizers", "optimisers", "optims", "opts"))

    def _element_kind(self, value: cst.BaseExpression) -> Kind | None:
        if isinstance(value, cst.List | cst.Tuple | cst.Set):
            kinds = {self.kind_of_value(e.value) for e in value.elements}
        elif isinstance(value, cst.Dict):
            kinds = {self.kind_of_value(e.value) for e in value.elements
                     if isinstance(e, cst.DictElement)}
        elif isinstance(value, cst.ListComp | cst.GeneratorExp):
            kinds = {self.kind_of_value(value.elt)}
        elif isinstance(value, cst.DictComp):
            kinds = {self.kind_of_value(value.value)}
        else:
            return None
        return kinds.pop() if len(kinds) == 1 else None

    # Use ----------------------------------------------------------------------------------
    def _from_uses(self) -> None:
        methods_by_key: dict[str, set[str]] = {}
        for site in self.facts.calls:
            call = site.call
            kind = self.kind_of_value(call)
            if kind is Kind.OPTIMIZER:
                for arg in call.args:
                    for owner in parameter_owners(arg.value):
                        self._set(owner, Kind.MODEL)
            elif kind is Kind.SCHEDULER and call.args:
                self._set(receiver_key(call.args[0].value), Kind.OPTIMIZER)
            if isinstance(call.func, cst.Attribute):
                key = receiver_key(call.func.value)
                if key is not None:
                    methods_by_key.setdefault(key, set()).add(call.func.attr.value)
        for key, methods in methods_by_key.items():
            if key in self.kinds:
                continue
            if {"zero_grad", "step"} <= methods:
                if not self._an_object(key):
                    self._set(key, Kind.OPTIMIZER)
            elif "eval" in methods and "step" not in methods:
                self._set(key, Kind.MODEL)

    def _an_object(self, key: str) -> bool:
        """`self` (a Learner calling its own `zero_grad()` and `step()`, which its callbacks
        define), or a key some assignment makes an instance of a class that is no optimizer
        (`learn = Learner(...)`): its methods say nothing of its kind."""
        if key in ("self", "cls"):
            return True
        return any(
            key in b.keys and isinstance(b.value, cst.Call)
            and (dotted(b.value.func) or "").rsplit(".", 1)[-1][:1].isupper()
            and self.kind_of_value(b.value) is not Kind.OPTIMIZER
            for b in self.facts.bindings)

    def _from_call_sites(self) -> None:
        by_name = {f.name.value: f for f in self.facts.functions}
        for site in self.facts.calls:
            name = dotted(site.call.func)
            if name is None:
                continue
            function = by_name.get(name.removeprefix("self."))
            if function is None:
                continue
            params = [p.name.value for p in function.params.params]
            if params and params[0] in ("self", "cls") and name.startswith("self."):
                params = params[1:]
            for position, arg in enumerate(site.call.args):
                if arg.star:
                    break
                if arg.keyword is not None:
                    param = arg.keyword.value
                elif position < len(params):
                    param = params[position]
                else:
                    continue
                self._set(param, self.of_expr(arg.value))


def _loop_pairs(
    target: cst.BaseExpression, iterable: cst.BaseExpression
) -> list[tuple[str, cst.BaseExpression, cst.BaseExpression]]:
    """(loop variable, container whose elements it takes, what to iterate for just those
    elements) for the usual iteration shapes."""
    if isinstance(iterable, cst.Call) and isinstance(target, cst.Tuple | cst.List):
        names = [dotted(e.value) for e in target.elements]
        func = dotted(iterable.func)
        args = [a.value for a in iterable.args]
        if func == "zip" and len(args) == len(names):
            return [(n, _values_of(a), a) for n, a in zip(names, args, strict=True)
                    if n is not None]
        if func == "enumerate" and args and len(names) == 2 and names[1] is not None:
            return [(names[1], _values_of(args[0]), args[0])]
        if (isinstance(iterable.func, cst.Attribute) and iterable.func.attr.value == "items"
                and len(names) == 2 and names[1] is not None):
            values = iterable.with_changes(func=iterable.func.with_changes(attr=cst.Name("values")))
            return [(names[1], iterable.func.value, values)]
        return []
    name = dotted(target)
    if name is None:
        return []
    if (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Attribute)
            and iterable.func.attr.value == "values" and not iterable.args):
        return [(name, iterable.func.value, iterable)]
    return [(name, iterable, iterable)]


def _values_of(iterable: cst.BaseExpression) -> cst.BaseExpression:
    """The container behind `container.values()`, else `iterable` itself."""
    if (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Attribute)
            and iterable.func.attr.value == "values" and not iterable.args):
        return iterable.func.value
    return iterable


def optimizer_loop_elements(kinds: KindTable, loop: cst.CSTNode) -> dict[str, tuple[str, str]]:
    """For a loop over a container of optimizers: {loop variable: (`container[*]`, what to
    iterate for its elements)}."""
    return kinds.loop_elements.get(id(loop), {})


def parameter_owners(node: cst.CSTNode) -> list[str]:
    """`model` for every `model.parameters()` / `model.named_parameters()` inside `node`."""
    owners: list[str] = []
    for current in descendants(node):
        if (
            isinstance(current, cst.Call)
            and isinstance(current.func, cst.Attribute)
            and current.func.attr.value in ("parameters", "named_parameters")
        ):
            key = receiver_key(current.func.value)
            if key is not None:
                owners.append(key)
    return owners
