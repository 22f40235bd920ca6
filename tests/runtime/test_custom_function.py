"""custom_fwd/custom_bwd from the runtime: backward runs in the forward's autocast state."""

from __future__ import annotations

import typing

import torch
from amprewrite_runtime import autocast, custom_bwd, custom_fwd


class MatMul(torch.autograd.Function):
    seen: typing.ClassVar[list[torch.dtype]] = []

    @staticmethod
    @custom_fwd
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w.t()

    @staticmethod
    @custom_bwd
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        MatMul.seen.append((grad @ w).dtype)  # a matmul on saved float32 tensors
        return grad @ w, grad.t() @ x


class Solve(torch.autograd.Function):
    @staticmethod
    @custom_fwd(cast_inputs="float32")
    def forward(ctx, a, b):
        return torch.linalg.solve(a, b)


def test_backward_runs_under_the_forwards_autocast_state() -> None:
    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(5, 3, requires_grad=True)
    with autocast():
        out = MatMul.apply(x, w)
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()
    assert MatMul.seen[-1] == torch.bfloat16  # autocast was active in backward too
    assert x.grad is not None and x.grad.dtype == torch.float32


def test_cast_inputs_runs_the_forward_in_float32() -> None:
    a = torch.eye(3) * 2
    with autocast():
        out = Solve.apply(a.bfloat16(), torch.ones(3, 1).bfloat16())
    assert out.dtype == torch.float32
