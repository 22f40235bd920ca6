"""The op table (`amprewrite.analysis.dtype.ops`) against the installed torch.

Every row runs its example on small tensors under CPU autocast in bfloat16 and float16, and
outside it, and the dtype it returns (or the error it raises) must be the one the row claims:
its CPU autocast class, its low-precision kernels, one dtype for its inputs, what it returns.
The CUDA column is read against the lists torch registers (`ATen/autocast_mode.h`), and run
when a GPU is at hand. A torch release that changes an op fails here: correct the row.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Categorical, Normal

from amprewrite.analysis.dtype.ops import FLOAT32_NAMESPACES, OPS, Cast, Op, Returns, Where

LOW = [torch.bfloat16, torch.float16]
_TENSOR_RESULTS = (Returns.TENSOR, Returns.LIKE, Returns.VALUES_AND_INDICES)


def _inputs(device: str) -> dict[str, Any]:
    """The examples' tensors, in float32 (`x`... are the ones a mixed run makes low)."""
    torch.manual_seed(0)
    a = torch.randn(3, 3)
    values = {
        "a": a, "x": torch.randn(3, 3), "v": torch.randn(3), "xv": torch.randn(3),
        "b": torch.randn(2, 3, 3), "xb": torch.randn(2, 3, 3), "ximg": torch.randn(1, 2, 5, 5),
        "k": torch.randn(3, 2, 3, 3), "kt": torch.randn(2, 3, 3, 3), "w3": torch.randn(2, 3, 3),
        "w1": torch.ones(1), "grid": torch.rand(1, 2, 2, 2) * 2 - 1,
        "pos": torch.rand(3, 3) + 0.5, "unit": torch.rand(3, 3) * 0.8 - 0.4,
        "spd": a @ a.T + 3 * torch.eye(3), "prob": torch.rand(3, 3) * 0.8 + 0.1,
        "xprob": torch.rand(3, 3) * 0.8 + 0.1, "labels": torch.tensor([0, 1, 2]),
        "idx": torch.tensor([0, 1]), "cells": torch.zeros(3, 3, dtype=torch.long),
        "mask": torch.rand(3, 3) > 0.5,
    }
    return {name: value.to(device) for name, value in values.items()}


def _run(op: Op, device: str, low: torch.dtype | None = None, only_x: bool = False) -> Any:
    """The row's example, its floating inputs made `low` (those named `x...` with `only_x`)."""
    scope: dict[str, Any] = {"torch": torch, "F": F, "nn": nn, "Categorical": Categorical,
                             "Normal": Normal, "buffer": io.BytesIO(),
                             "array": np.ones(3, dtype=np.float32), "layer": nn.Linear(3, 3)}
    for name, value in _inputs(device).items():
        if low is not None and value.is_floating_point() and (
                not only_x or name.startswith("x")):
            value = value.to(low)
        scope[name] = value
    if Where.MODULE in op.where:  # the module, moved to the device
        example = op.example.replace(")(", f").to({device!r})(", 1)
        return eval(example, scope)
    return eval(op.example, scope)


def _dtype(result: Any) -> torch.dtype:
    """The dtype of a result: the first tensor of a tuple (`values, indices`, `U, S, V`)."""
    while isinstance(result, tuple):
        result = result[0]
    assert isinstance(result, torch.Tensor), result
    return result.dtype


def _raises(call: Callable[[], Any]) -> bool:
    try:
        call()
    except (RuntimeError, TypeError, ValueError, NotImplementedError):
        return True
    return False


def _autocast(device: str, dtype: torch.dtype) -> torch.autocast:
    return torch.autocast(device, dtype=dtype)


def _expected(cast: Cast, low: torch.dtype, inputs: torch.dtype) -> torch.dtype:
    """The dtype of a result under autocast in `low`, from inputs of one dtype."""
    return {Cast.LOW: low, Cast.FLOAT32: torch.float32}.get(cast, inputs)


def _check_returns(op: Op, result: Any) -> None:
    kinds: dict[Returns, Callable[[Any], bool]] = {
        Returns.INTEGER: lambda r: isinstance(r, torch.Tensor) and not r.is_floating_point(),
        Returns.NUMBER: lambda r: isinstance(r, int | float | bool | list),
        Returns.OTHER: lambda r: not isinstance(r, torch.Tensor),
        Returns.MAYBE_INTEGER: lambda r: isinstance(r, torch.Tensor),
        Returns.FLOAT32: lambda r: r.dtype in (torch.float32, torch.float64),
        Returns.LOW: lambda r: r.dtype in LOW,
        Returns.NEW: lambda r: r.dtype not in LOW,
        Returns.COMPLEX: lambda r: r.is_complex(),
    }
    assert kinds[op.returns](result), f"{op.name} returned {result!r}, not {op.returns.value}"


def _cuda_lists() -> dict[Cast, set[str]]:
    """The ops torch registers for CUDA autocast, by class, from the installed headers."""
    header = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
    if not header.exists():
        pytest.skip("this torch ships no ATen headers")
    text = header.read_text(encoding="utf-8")
    lists = {}
    for cast, macros in ((Cast.LOW, ["LOWER_PRECISION_FP"]), (Cast.PROMOTE, ["PROMOTE"]),
                         (Cast.FLOAT32, ["FP32", "FP32_SET_OPT_DTYPE",
                                         "DIFFERENT_REDISPATCH_SIGNATURE"])):
        names: set[str] = set()
        for macro in macros:
            body = re.search(rf"#define AT_FORALL_{macro}\(_\)(.*?)\n\n", text, re.S)
            assert body is not None, f"torch {torch.__version__} has no AT_FORALL_{macro}"
            names.update(re.findall(r"_\((?:ADD_NS\()?(\w+)", body.group(1)))
        lists[cast] = names
    return lists


@pytest.mark.parametrize("low", LOW, ids=str)
@pytest.mark.parametrize("op", OPS, ids=lambda op: op.name)
def test_the_row_is_what_cpu_autocast_does(op: Op, low: torch.dtype) -> None:
    kernel = str(low).removeprefix("torch.") in op.low_kernels
    with _autocast("cpu", low):
        result = _run(op, "cpu")
    if op.returns not in _TENSOR_RESULTS:
        _check_returns(op, result)
        assert _raises(lambda: _run(op, "cpu", low)) is not kernel
        return
    if op.returns is Returns.VALUES_AND_INDICES and op.name in ("max", "min", "topk", "sort",
                                                                "mode", "median", "kthvalue"):
        assert not result[1].is_floating_point()
    assert _dtype(result) == _expected(op.cpu, low, torch.float32), op.cpu
    weights = Where.MODULE in op.where  # float32 weights: low inputs make a mixed call
    with _autocast("cpu", low):
        if op.cpu in (Cast.NONE, Cast.PROMOTE) and not kernel:
            assert _raises(lambda: _run(op, "cpu", low)), f"{op.name} has a {low} kernel"
        elif op.cpu is Cast.NONE and weights and op.same_dtype:
            assert _raises(lambda: _run(op, "cpu", low)), f"{op.name} takes mixed dtypes"
        else:
            assert _dtype(_run(op, "cpu", low)) == _expected(op.cpu, low, low)
    if not kernel:
        assert _raises(lambda: _run(op, "cpu", low)), f"{op.name} has a {low} kernel"
        return
    if weights:
        assert _raises(lambda: _run(op, "cpu", low)) is op.same_dtype
        return
    assert _dtype(_run(op, "cpu", low)) == low
    mixed = _raises(lambda: _run(op, "cpu", low, only_x=True))
    assert mixed is op.same_dtype, f"{op.name}: mixed dtypes {'fail' if mixed else 'run'}"
    if op.source is not None and op.cpu is not Cast.PROMOTE:  # autocast casts neither
        with _autocast("cpu", low):
            assert _raises(lambda: _run(op, "cpu", low, only_x=True))


@pytest.mark.parametrize("op", [op for op in OPS if op.returns in _TENSOR_RESULTS],
                         ids=lambda op: op.name)
def test_the_cuda_column_is_the_list_torch_registers_the_op_in(op: Op) -> None:
    listed = {cast for cast, names in _cuda_lists().items() if (op.aten or op.name) in names}
    if op.cuda in (Cast.NONE, Cast.RAISES):  # CUDA's binary_cross_entropy: a banned kernel
        assert not listed, f"{op.name} is registered as {listed}"
    else:
        assert listed == {op.cuda}, f"{op.name} is registered as {listed}"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")
@pytest.mark.parametrize("low", LOW, ids=str)
@pytest.mark.parametrize("op", [op for op in OPS if op.returns in _TENSOR_RESULTS],
                         ids=lambda op: op.name)
def test_the_row_is_what_cuda_autocast_does(op: Op, low: torch.dtype) -> None:
    with _autocast("cuda", low):
        if op.cuda is Cast.RAISES:
            assert _raises(lambda: _run(op, "cuda"))
            return
        assert _dtype(_run(op, "cuda")) == _expected(op.cuda, low, torch.float32)


@pytest.mark.parametrize("low", LOW, ids=str)
@pytest.mark.parametrize("call", ["torch.linalg.eigh(spd)", "torch.fft.rfft(x)"])
def test_the_float32_namespaces_have_no_low_kernels(call: str, low: torch.dtype) -> None:
    assert call.startswith(FLOAT32_NAMESPACES)
    scope = {"torch": torch, **{k: v.to(low) for k, v in _inputs("cpu").items()
                                if v.is_floating_point()}}
    assert _raises(lambda: eval(call, scope))
