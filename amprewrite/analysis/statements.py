"""Classifying statements: does it compute, move data, call backward or step an optimizer."""

from __future__ import annotations

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts, Statement
from amprewrite.analysis.names import dotted, walk

# Calls that move, reshape or create data: they do not start an autocast region.
_DATA_METHODS = frozenset({
    "to", "cuda", "cpu", "float", "double", "half", "bfloat16", "long", "int", "bool", "byte",
    "view", "view_as", "reshape", "squeeze", "unsqueeze", "permute", "transpose", "t",
    "contiguous", "pin_memory", "detach", "clone", "flatten", "size", "numel", "item", "type",
    "split", "chunk", "expand", "expand_as", "repeat", "fill_", "zero_", "requires_grad_",
    "get", "keys", "values", "items", "append", "extend", "pop", "copy_", "tolist", "numpy",
    "zero_grad", "train", "eval",
})
_DATA_FUNCTIONS = frozenset({
    "len", "next", "iter", "enumerate", "zip", "range", "print", "isinstance", "tuple", "list",
    "dict", "int", "float", "str", "bool", "min", "max", "getattr", "setattr", "hasattr",
})
_TORCH_CREATION = frozenset({
    "tensor", "as_tensor", "from_numpy", "randn", "rand", "randint", "randperm", "zeros", "ones",
    "full", "empty", "arange", "linspace", "zeros_like", "ones_like", "full_like", "empty_like",
    "randn_like", "rand_like", "randint_like", "stack", "cat", "device", "manual_seed",
    "no_grad", "inference_mode", "enable_grad", "set_grad_enabled",
})


def calls_in(statement: cst.CSTNode) -> list[cst.Call]:
    return [node for node in walk(statement) if type(node) is cst.Call]


def is_data_call(call: cst.Call, facts: ModuleFacts) -> bool:
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value in _DATA_METHODS:
        return True
    name = dotted(func)
    if name in _DATA_FUNCTIONS:
        return True
    resolved = facts.imports.resolve(func)
    if resolved is not None:
        module, _, last = resolved.rpartition(".")
        if module == "torch" and last in _TORCH_CREATION:
            return True
        if module.startswith(("logging", "wandb", "tqdm", "time", "random", "math")):
            return True
    return False


def is_compute(statement: cst.CSTNode, facts: ModuleFacts) -> bool:
    """True when the statement calls something that is neither data movement nor creation."""
    return any(not is_data_call(call, facts) for call in calls_in(statement))


def is_backward_call(call: cst.Call) -> bool:
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward"


def is_zero_grad(call: cst.Call) -> bool:
    """`x.zero_grad()`: an optimizer or a model zeroing its gradients."""
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "zero_grad"


def is_step_call(call: cst.Call) -> bool:
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "step"


def is_definition(statement: Statement) -> bool:
    return isinstance(statement, cst.FunctionDef | cst.ClassDef)
