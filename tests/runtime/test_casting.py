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


def test_float32_sigmoid_keeps_probabilities_near_one_and_the_state_dict() -> None:
    """Under bfloat16 autocast a plain `nn.Sigmoid()` rounds sigmoid(8) to 1.0 (BCE of a
    negative label then saturates); the layer `float32_sigmoid` returns does not, holds no
    parameters (the model's state dict is the FP32 script's) and still is an `nn.Sigmoid`."""
    import copy

    from amprewrite_runtime import float32_sigmoid

    plain = torch.nn.Sequential(torch.nn.Linear(1, 1), torch.nn.Sigmoid())
    kept = copy.deepcopy(plain)
    kept[1] = float32_sigmoid(kept[1])
    for model in (plain, kept):
        with torch.no_grad():
            model[0].weight.fill_(8.0)
            model[0].bias.zero_()
    x = torch.ones(1, 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        rounded, precise = plain(x), kept(x)
    assert rounded.dtype == torch.bfloat16 and rounded.item() == 1.0
    assert precise.dtype == torch.float32 and 0.999 < precise.item() < 1.0
    assert isinstance(kept[1], torch.nn.Sigmoid)
    assert kept.state_dict().keys() == plain.state_dict().keys()
    assert copy.deepcopy(kept)(x).dtype == torch.float32
