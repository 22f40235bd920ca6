"""`to_float32`: the safe cast of values leaving autocast, integers left alone."""

from __future__ import annotations

from collections import namedtuple

import torch
from amprewrite_runtime import to_float32


def test_floating_tensors_become_float32_and_integers_stay() -> None:
    low = torch.ones(2, dtype=torch.bfloat16)
    action = torch.tensor([1, 2])
    mask = torch.tensor([True, False])
    assert to_float32(low).dtype == torch.float32
    assert to_float32(action) is action
    assert to_float32(mask) is mask
    assert to_float32(3) == 3 and to_float32("x") == "x"


def test_containers_are_rebuilt_with_their_tensors_cast() -> None:
    Out = namedtuple("Out", "logits index")
    low = torch.ones(2, dtype=torch.float16)
    value = {"out": [low, (low, torch.tensor([3]))], "named": Out(low, torch.tensor([0]))}
    cast = to_float32(value)
    assert cast["out"][0].dtype == torch.float32
    assert cast["out"][1][0].dtype == torch.float32
    assert cast["out"][1][1].dtype == torch.int64
    assert isinstance(cast["named"], Out) and cast["named"].logits.dtype == torch.float32
    assert cast["named"].index.dtype == torch.int64
