"""Constants float16 cannot hold, in code under autocast: which are rewritten, which reported."""

from __future__ import annotations

import pytest

from amprewrite.engine import rewrite_source
from amprewrite.options import Options

TEMPLATE = '''import torch
import torch.nn as nn

BIG = -1e9


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, q, k, mask):
        {body}


model = Attention()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for q, k, mask in batches:
    out = model(q, k, mask)
    loss = out.sum()
    loss.backward()
    optimizer.step()
'''


def _rewrite(body: str) -> tuple[str, list[str]]:
    source = TEMPLATE.replace("{body}", body.strip().replace("\n", "\n        "))
    result = rewrite_source(source.encode(), Options())
    return result.source.decode(), [f.code for f in result.findings if f.code.startswith("AMP14")]


@pytest.mark.parametrize("value", ["-1e9", "-10**9", 'float("-1e9")', "-1_000_000_000",
                                   "BIG", "-1 * 2**31", "-65505.0",
                                   "torch.finfo(torch.float32).min", "torch.finfo().min",
                                   "np.finfo(np.float64).min", "torch.finfo(torch.bfloat16).min"])
def test_every_spelling_of_a_huge_negative_fill_is_rewritten(value: str) -> None:
    output, codes = _rewrite(f"s = q @ k.transpose(-2, -1)\nreturn s.masked_fill(mask, {value})")
    assert "s.masked_fill(mask, torch.finfo(s.dtype).min)" in output
    assert codes == ["AMP141"]


@pytest.mark.parametrize("body", [
    "s = torch.bmm(q, k)\ns[mask] = 1e10\nreturn s",
    "s = torch.einsum('bqd,bkd->bqk', q, k)\nreturn torch.where(mask, s, -1e9)",
    "s = self.proj(q)\ns.masked_fill_(mask, -1e9)\nreturn s",
    "s = self.proj(q)\nreturn torch.full_like(s, -1e9)",
])
def test_fills_of_float16_tensors_are_rewritten(body: str) -> None:
    output, codes = _rewrite(body)
    assert "torch.finfo(s.dtype)" in output
    assert codes == ["AMP141"]


@pytest.mark.parametrize("body", [
    "s = q @ k.transpose(-2, -1)\nreturn s.masked_fill(mask, float('-inf'))",  # inf is fine
    "s = q @ k.transpose(-2, -1)\nreturn s.masked_fill(mask, -1e4)",  # float16 holds it
    "s = (q @ k.transpose(-2, -1)).float()\nreturn s.masked_fill(mask, -1e9)",  # float32
    "p = torch.softmax(q @ k, -1)\nreturn p.masked_fill(mask, -1e9)",  # softmax: float32
    "s = self.proj(q)\nreturn torch.full_like(s, -1e9, dtype=torch.float32)",
    "s = torch.zeros(4, 4)\nreturn s.masked_fill(mask, -1e9)",  # created float32
    "self.best[0] = 1e10\nreturn self.proj(q)",  # a subscript of something not float16
])
def test_fills_float16_never_sees_are_left_alone(body: str) -> None:
    output, codes = _rewrite(body)
    assert "finfo" not in output
    assert codes == []


def test_a_fill_of_an_expression_is_reported_not_rewritten() -> None:
    output, codes = _rewrite("return (q @ k).masked_fill(mask, -1e9)")
    assert "finfo" not in output and "-1e9" in output
    assert codes == ["AMP142"]


@pytest.mark.parametrize("body", [
    "s = self.proj(q)\nreturn torch.log(s.clamp(min=1e-8))",
    "s = self.proj(q)\nreturn s.clamp(max=1e5)",
    "s = self.proj(q)\nreturn torch.log(s + 1e-8)",
    "s = self.proj(q)\nreturn s * 1e6",
])
def test_risky_constants_on_float16_tensors_are_reported(body: str) -> None:
    output, codes = _rewrite(body)
    assert "finfo" not in output
    assert codes == ["AMP143"]


def test_risky_constants_on_float32_values_are_not_reported() -> None:
    _, codes = _rewrite("p = torch.softmax(self.proj(q), -1)\nreturn torch.log(p + 1e-8)")
    assert codes == []


def test_fills_in_a_region_statement_are_rewritten() -> None:
    source = TEMPLATE.replace("{body}", "return self.proj(q)").replace(
        "    loss = out.sum()", "    out = out.masked_fill(mask, -1e9)\n    loss = out.sum()")
    output = rewrite_source(source.encode(), Options()).source.decode()
    assert "out = out.masked_fill(mask, torch.finfo(out.dtype).min)" in output


def test_code_outside_autocast_is_left_alone() -> None:
    source = TEMPLATE.replace("{body}", "return self.proj(q)") + (
        "\n\ndef report(s, mask):\n    return s.masked_fill(mask, -1e9)\n")
    output = rewrite_source(source.encode(), Options()).source.decode()
    assert "finfo" not in output


def test_a_module_function_the_forward_calls_is_searched() -> None:
    """The Annotated Transformer's `attention(query, key, value, mask)` helper."""
    helper = '''

def attention(query, key, mask):
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(query.size(-1))
    scores = scores.masked_fill(mask == 0, -1e9)
    return scores.softmax(dim=-1)
'''
    source = "import math\n" + TEMPLATE.replace("{body}", "return attention(q, k, mask)") + helper
    output = rewrite_source(source.encode(), Options()).source.decode()
    assert "scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)" in output


@pytest.mark.parametrize("value", ["torch.finfo(s.dtype).min", "torch.finfo(torch.float16).min",
                                   "float('-inf')"])
def test_fills_every_dtype_holds_are_left_alone(value: str) -> None:
    output, codes = _rewrite(f"s = q @ k.transpose(-2, -1)\nreturn s.masked_fill(mask, {value})")
    assert f"s.masked_fill(mask, {value})" in output
    assert codes == []


MODEL_MODULE = '''import torch
from torch import nn


class Affine(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1, dim))
        self.initialised = False

    def forward(self, x):
        {body}
        return x * self.scale
{extra}

class Norm(Affine):
    def forward(self, x):
        {derived}
        return super().forward(x)
'''


@pytest.mark.parametrize(("body", "derived"), [
    ("if not self.initialised:\n    self.scale.data = 1 / x.std(0, keepdim=True)", "pass"),
    ("pass", "self.scale.data = (1 / x.std(0, keepdim=True)).detach()"),  # a derived class
    ("self.init(x)", "pass"),  # in a method the forward calls
])
def test_a_models_data_init_takes_the_parameters_dtype_in_a_model_module(
        body: str, derived: str) -> None:
    """A module with nothing to train: its models run under another script's autocast, where
    `x` may be low precision and assigning `.data` would change the parameter's dtype."""
    extra = ("\n    def init(self, x):\n        self.scale.data = 1 / x.std(0, keepdim=True)\n"
             if body == "self.init(x)" else "")
    source = MODEL_MODULE.replace("{body}", body.replace("\n", "\n        ")).replace(
        "{derived}", derived).replace("{extra}", extra)
    result = rewrite_source(source.encode(), Options())
    output = result.source.decode()
    assert output.count(".to(self.scale.dtype)") == 1, output
    assert [f.code for f in result.findings if f.code != "AMP000"] == ["AMP112"]
    assert rewrite_source(result.source, Options()).source == result.source  # once


@pytest.mark.parametrize("value", ["0.0", "values.to(self.scale.dtype)",
                                   "values.type_as(self.scale)"])
def test_a_data_init_of_the_parameters_dtype_already_is_kept(value: str) -> None:
    source = MODEL_MODULE.replace("{body}", f"values = x.std(0)\n        self.scale.data = {value}"
                                  ).replace("{derived}", "pass").replace("{extra}", "")
    assert rewrite_source(source.encode(), Options()).source == source.encode()
