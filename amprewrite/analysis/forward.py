"""Recognising a forward pass and a loss computation in a statement."""

from __future__ import annotations

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.kinds import Kind, KindTable
from amprewrite.analysis.names import dotted, receiver_key, walk
from amprewrite.analysis.statements import calls_in, is_data_call

# Module methods that are not a forward pass: every public method of torch 2.13's `nn.Module`
# but `forward`, and the commonest of Hugging Face's `PreTrainedModel` and peft's.
_NOT_FORWARD = frozenset({
    "add_module", "apply", "bfloat16", "buffers", "children", "compile", "cpu", "cuda", "double",
    "eval", "extra_repr", "float", "get_buffer", "get_extra_state", "get_parameter",
    "get_submodule", "half", "ipu", "load_state_dict", "modules", "mtia", "named_buffers",
    "named_children", "named_modules", "named_parameters", "parameters", "register_backward_hook",
    "register_buffer", "register_forward_hook", "register_forward_pre_hook",
    "register_full_backward_hook", "register_full_backward_pre_hook",
    "register_load_state_dict_post_hook", "register_load_state_dict_pre_hook", "register_module",
    "register_parameter", "register_state_dict_post_hook", "register_state_dict_pre_hook",
    "requires_grad_", "set_extra_state", "set_submodule", "share_memory", "state_dict", "to",
    "to_empty", "train", "type", "xpu", "zero_grad",
    "get_input_embeddings", "get_output_embeddings", "resize_token_embeddings", "tie_weights",
    "gradient_checkpointing_enable", "gradient_checkpointing_disable", "save_pretrained",
    "push_to_hub", "num_parameters", "enable_input_require_grads", "print_trainable_parameters",
})


def is_model_call(call: cst.Call, kinds: KindTable) -> bool:
    """`model(x)`, `self.net(x)`, `model.encode(x)` for a key known to hold a model."""
    func = call.func
    if kinds.of_expr(func) is Kind.MODEL:
        return True
    return (
        isinstance(func, cst.Attribute)
        and func.attr.value not in _NOT_FORWARD
        and kinds.of_expr(func.value) is Kind.MODEL
    )


def is_loss_call(call: cst.Call, facts: ModuleFacts, kinds: KindTable) -> bool:
    """A criterion (`nn.*Loss` instance), `F.*loss*`/`cross_entropy`, or a `loss_fn(...)`."""
    if kinds.of_expr(call.func) is Kind.CRITERION:
        return True
    name = (facts.imports.resolve(call.func) or receiver_key(call.func) or "").lower()
    last = name.rsplit(".", 1)[-1]
    return "loss" in last or "criterion" in last or "entropy" in last or last == "kl_div"


def computes(
    statement: cst.CSTNode, facts: ModuleFacts, kinds: KindTable, depth: int = 0
) -> bool:
    """The statement computes (part of) a forward pass: a call that is not data movement,
    and not a call of a local helper (`get_batch(...)`) whose body only prepares data."""
    for call in calls_in(statement):
        if is_data_call(call, facts):
            continue
        helper = _local_function(call, facts)
        if helper is None or is_model_call(call, kinds) or is_loss_call(call, facts, kinds):
            return True
        if depth < 2 and _body_computes(helper, facts, kinds, depth + 1):
            return True
        if any(kinds.of_expr(arg.value) is Kind.MODEL for arg in call.args):
            return True  # `compute_loss(model, batch)`
    return False


def _local_function(call: cst.Call, facts: ModuleFacts) -> cst.FunctionDef | None:
    """The function this module defines that `call` invokes (`helper(...)`, `self.helper(...)`)."""
    name = dotted(call.func)
    if name is None or name.count(".") > 1 or (("." in name) and not name.startswith("self.")):
        return None
    name = name.removeprefix("self.")
    return next((f for f in facts.functions if f.name.value == name), None)


def _body_computes(
    function: cst.FunctionDef, facts: ModuleFacts, kinds: KindTable, depth: int
) -> bool:
    params = {p.name.value for p in function.params.params} - {"self", "cls"}
    for call in calls_in(function.body):
        root = (dotted(call.func) or "").split(".", 1)[0]
        if root in params and not is_data_call(call, facts):
            return True  # calls what it was given: a model or a loss function
    return any(computes(line, facts, kinds, depth) for line in _lines(function))


def _lines(function: cst.FunctionDef) -> list[cst.SimpleStatementLine]:
    return [node for node in walk(function.body) if isinstance(node, cst.SimpleStatementLine)]


def computes_loss(statement: cst.CSTNode, facts: ModuleFacts, kinds: KindTable) -> bool:
    return any(is_loss_call(call, facts, kinds) for call in calls_in(statement))
