"""O2/O3: cast the model, cast inputs at `forward`, keep float32 master weights."""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

LOW_PRECISION = (torch.float16, torch.bfloat16)


def cast_model(model: nn.Module, dtype: torch.dtype, keep_batchnorm_fp32: bool) -> None:
    """Cast floating-point parameters and buffers in place (optimizers keep their references);
    batchnorm stays float32 when asked (cudnn batchnorm takes float16 input, float32 weights)."""
    for module in model.modules():
        if keep_batchnorm_fp32 and isinstance(module, _BatchNorm):
            continue
        for param in module.parameters(recurse=False):
            if param.is_floating_point():
                param.data = param.data.to(dtype)
        for name, buffer in module.named_buffers(recurse=False):
            if buffer is not None and buffer.is_floating_point():
                setattr(module, name, buffer.to(dtype))


def cast_inputs_at_forward(model: nn.Module, dtype: torch.dtype) -> None:
    """Like apex O2: floating-point inputs to `dtype`, floating-point outputs to float32."""
    original = model.forward

    @functools.wraps(original)
    def forward(*args: Any, **kwargs: Any) -> Any:
        output = original(*_cast(args, dtype), **_cast(kwargs, dtype))
        return _cast(output, torch.float32)

    model.forward = forward  # type: ignore[method-assign]


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

    The optimizer's param groups are repointed at the masters. Gradients are copied from the
    model to the masters before unscaling (so float16 gradients are never unscaled in place),
    and updated masters are copied back into the model after each step. `model.state_dict()`
    holds the float32 masters, and loading a state dict refreshes them.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
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
        self._names = {name: by_id[id(p)] for name, p in model.named_parameters()
                       if id(p) in by_id}
        # torch marks hooks with an attribute, which bound methods cannot carry: wrap them.
        model.register_state_dict_post_hook(functools.partial(MasterWeights._save_masters, self))
        load_hook = functools.partial(MasterWeights._load_masters, self)
        model.register_load_state_dict_pre_hook(load_hook)
        original_zero_grad = optimizer.zero_grad

        @functools.wraps(original_zero_grad)
        def zero_grad(set_to_none: bool = True) -> None:
            original_zero_grad(set_to_none)
            for param, _ in self.pairs:
                if set_to_none:
                    param.grad = None
                elif param.grad is not None:
                    param.grad.zero_()

        optimizer.zero_grad = zero_grad  # type: ignore[method-assign]

    def masters(self) -> list[nn.Parameter]:
        return [master for _, master in self.pairs]

    def grads_to_masters(self) -> None:
        for param, master in self.pairs:
            if param.grad is None:
                master.grad = None
            elif master.grad is None:
                master.grad = param.grad.float()
            else:
                master.grad.copy_(param.grad)

    def masters_to_model(self) -> None:
        with torch.no_grad():
            for param, master in self.pairs:
                param.copy_(master)

    def _save_masters(self, module: nn.Module, state: dict, prefix: str, metadata: Any) -> None:
        for name, master in self._names.items():
            if prefix + name in state:
                state[prefix + name] = master.detach().clone()

    def _load_masters(self, module: nn.Module, state: dict, prefix: str, *args: Any) -> None:
        with torch.no_grad():
            for name, master in self._names.items():
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
