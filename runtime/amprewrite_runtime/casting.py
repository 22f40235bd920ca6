"""Casting values that leave autocast back to float32, integers left alone."""

from __future__ import annotations

from typing import Any

import torch


def to_float32(value: Any) -> Any:
    """`value` with every floating tensor in it cast to float32: a tensor, or the tensors
    inside tuples, lists and dicts (rebuilt as the same type). Integer and boolean tensors
    (a categorical sample, indices, masks) and other values come back as they are."""
    if isinstance(value, torch.Tensor):
        return value.float() if value.is_floating_point() else value
    if isinstance(value, dict):
        return type(value)((key, to_float32(item)) for key, item in value.items())
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return type(value)(*(to_float32(item) for item in value))
    if isinstance(value, list | tuple):
        return type(value)(to_float32(item) for item in value)
    return value


class Float32Sigmoid(torch.nn.Sigmoid):
    """`nn.Sigmoid` computed in float32 whatever its input's dtype: under autocast a
    bfloat16/float16 sigmoid rounds probabilities near 1 to 1.0, which saturates a binary
    cross-entropy on them. It holds no parameters: the model's state dict is unchanged."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(input.float())


def float32_sigmoid(layer: torch.nn.Sigmoid) -> torch.nn.Sigmoid:
    """`layer` (an `nn.Sigmoid()`, the last layer of a model whose probabilities feed binary
    cross-entropy) computing in float32; in FP32 it is the same layer."""
    layer.__class__ = Float32Sigmoid
    return layer
