"""O2/O3: cast the model, cast its inputs and outputs with hooks, keep float32 master weights."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from amprewrite_runtime.torch_internals import BATCHNORMS

LOW_PRECISION = (torch.float16, torch.bfloat16)


def cast_model(model: nn.Module, dtype: torch.dtype, keep_batchnorm_fp32: bool) -> None:
    """`model.to(dtype)`, which keeps its parameters (optimizers keep their references);
    batchnorm layers stay float32 with their exact values when asked (cudnn batchnorm takes
    float16 input with float32 weights)."""
    kept = [(module, module.state_dict()) for module in model.modules()
            if keep_batchnorm_fp32 and isinstance(module, BATCHNORMS)]
    model.to(dtype)
    for module, state in kept:  # the state holds the float32 tensors `to()` replaced
        module.float().load_state_dict(state)


def cast_inputs_at_forward(model: nn.Module, dtype: torch.dtype) -> None:
    """Like apex O2: floating-point inputs to `dtype` (a forward pre-hook), floating-point
    outputs to float32 (a forward hook, ahead of the model's other forward hooks). A module
    with no `forward` of its own is never called itself (an RL agent whose `get_value` and
    `get_action` call its networks, a `ModuleList`): its children are hooked instead."""
    if type(model).forward is nn.Module.forward:
        for child in model.children():
            cast_inputs_at_forward(child, dtype)
        return
    model.register_forward_pre_hook(functools.partial(_cast_inputs, dtype=dtype),
                                    with_kwargs=True)
    model.register_forward_hook(_outputs_to_float32, prepend=True)


def _cast_inputs(
    module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], *, dtype: torch.dtype
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return _cast(args, dtype), _cast(kwargs, dtype)


def _outputs_to_float32(module: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
    return _cast(output, torch.float32)


def _cast(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, tuple | list):
        return type(value)(_cast(v, dtype) for v in value)
    if isinstance(value, dict):
        return {k: _cast(v, dtype) for k, v in value.items()}
    return value


class MasterWeights:
    """float32 copies of a model's low-precision parameters, which the optimizer steps.

    The optimizer's param groups are repointed at the masters. Before unscaling, the model's
    gradients move to the masters (so float16 gradients are never unscaled in place): the
    masters' are overwritten and the model's cleared, so the next backward starts afresh, as
    after `zero_grad()`, whichever `zero_grad()` the script calls (the optimizer's clears the
    masters', the model's the model's). Updated masters are copied back into the model after
    each step. `model.state_dict()` holds the float32 masters, and loading a state dict
    refreshes them.
    """

    def __init__(self, models: Sequence[nn.Module], optimizer: torch.optim.Optimizer) -> None:
        self.pairs: list[tuple[nn.Parameter, nn.Parameter]] = []
        by_id: dict[int, nn.Parameter] = {}
        for group in optimizer.param_groups:
            params = []
            for param in group["params"]:
                if param.dtype in LOW_PRECISION:
                    master = nn.Parameter(param.detach().float(), param.requires_grad)
                    self.pairs.append((param, master))
                    by_id[id(param)] = master
                    _move_state(optimizer, param, master)
                    param = master
                params.append(param)
            group["params"] = params
        for model in models:  # the optimizer may step several (`[encoder, decoder]`)
            names = {name: by_id[id(p)] for name, p in model.named_parameters()
                     if id(p) in by_id}
            # torch marks hooks with an attribute, which bound methods cannot carry: wrap them.
            model.register_state_dict_post_hook(
                functools.partial(MasterWeights._save_masters, names))
            model.register_load_state_dict_pre_hook(
                functools.partial(MasterWeights._load_masters, names))

    def grads_to_masters(self) -> None:
        for param, master in self.pairs:
            grad, param.grad = param.grad, None
            if grad is None:
                master.grad = None
            elif master.grad is None:
                master.grad = grad.float()
            else:
                master.grad.copy_(grad)

    def masters_to_model(self) -> None:
        with torch.no_grad():
            for param, master in self.pairs:
                param.copy_(master)

    @staticmethod
    def _save_masters(
        names: dict[str, nn.Parameter], module: nn.Module, state: dict, prefix: str,
        metadata: Any,
    ) -> None:
        for name, master in names.items():
            if prefix + name in state:
                state[prefix + name] = master.detach().clone()

    @staticmethod
    def _load_masters(
        names: dict[str, nn.Parameter], module: nn.Module, state: dict, prefix: str, *args: Any
    ) -> None:
        with torch.no_grad():
            for name, master in names.items():
                if prefix + name in state:
                    master.copy_(state[prefix + name])


def _move_state(optimizer: torch.optim.Optimizer, old: nn.Parameter, new: nn.Parameter) -> None:
    """Optimizer state already built for a model parameter now belongs to its master."""
    if old in optimizer.state:
        optimizer.state[new] = {
            key: value.float() if isinstance(value, torch.Tensor) and value.is_floating_point()
            else value
            for key, value in optimizer.state.pop(old).items()
        }
