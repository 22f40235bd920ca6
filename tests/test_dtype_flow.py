"""The dtype flow: the values it gives expressions, and the saturating ops it casts."""

from __future__ import annotations

import libcst as cst
import pytest

from amprewrite.analysis import analyse
from amprewrite.analysis.dtype.flow import Scope
from amprewrite.analysis.dtype.value import (
    AUTOCAST_LOW,
    CAST_LOW,
    FLOAT32,
    FLOAT32_VALUE,
    LOW_VALUE,
    SCALAR_VALUE,
    UNKNOWN_VALUE,
    Precision,
    Value,
    join_all,
)
from amprewrite.engine import rewrite_source
from amprewrite.options import Options
from tests.execution import FIXTURES_DIR as FIXTURES


def test_join_keeps_every_dtype_either_may_have() -> None:
    mixed = LOW_VALUE.join(FLOAT32_VALUE)
    assert mixed.low and mixed.on_cuda() is Precision.UNKNOWN  # a 0-dim float32 keeps bf16
    assert LOW_VALUE.join(SCALAR_VALUE) == LOW_VALUE  # a number takes the tensor's dtype
    assert join_all([]) == SCALAR_VALUE and SCALAR_VALUE.on_cuda() is Precision.SCALAR
    assert LOW_VALUE.on_cuda() is Precision.LOW and FLOAT32_VALUE.on_cuda() is Precision.FLOAT32
    own_cast = Value(CAST_LOW, CAST_LOW)
    assert not own_cast.low and own_cast.on_cuda() is Precision.LOW  # `.half()`: low, not ours
    assert not UNKNOWN_VALUE.low and UNKNOWN_VALUE.on_cuda() is Precision.UNKNOWN


MODEL = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


def deep(h):
    return deeper(h)


def deeper(h):
    return h * 2


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)
        self.emb = nn.Embedding(10, 4)

    def forward(self, x, q, k, idx):
        {line}
        return x


model = Net()
"""


class _Recorder:
    """A `Uses` hook keeping the value of the probe line's right-hand side."""

    def __init__(self) -> None:
        self.values: list[Value] = []

    def expression(self, scope: Scope, node: cst.CSTNode) -> None:
        line = scope.statement
        if isinstance(line, cst.SimpleStatementLine) and isinstance(line.body[0], cst.Assign) \
                and isinstance(node, cst.BaseExpression) and node is line.body[0].value \
                and scope.flow.facts.module.code_for_node(line.body[0].targets[0].target) \
                == "probe":
            self.values.append(scope.value_of(node))

    def store(self, scope: Scope, target: cst.BaseExpression,
              value: cst.BaseExpression) -> None:
        return None


def _value(line: str) -> Value:
    analysis = analyse(cst.parse_module(MODEL.format(line=line)))
    forward = next(f for f in analysis.facts.functions if f.name.value == "forward")
    recorder = _Recorder()
    analysis.dtype_flow.follow(forward, recorder)  # a model method: under its caller's autocast
    assert len(recorder.values) == 1
    return recorder.values[0]


@pytest.mark.parametrize(("line", "cpu", "cuda"), [
    ("probe = q @ k", AUTOCAST_LOW, AUTOCAST_LOW),  # a matmul of unknowns is low under autocast
    ("probe = self.fc(x)", AUTOCAST_LOW, AUTOCAST_LOW),
    ("probe = self.fc(x).float()", FLOAT32, FLOAT32),
    ("probe = self.emb(idx)", FLOAT32, FLOAT32),  # its float32 weights' dtype
    ("probe = F.softmax(self.fc(x), -1)", AUTOCAST_LOW, FLOAT32),  # CUDA's float32 list only
    ("probe = self.fc(x) ** 2", AUTOCAST_LOW, FLOAT32),  # CUDA runs pow in float32
    ("probe = self.fc(x).masked_fill(x > 0, 0.0)", AUTOCAST_LOW, AUTOCAST_LOW),  # a bool mask
    ("probe = self.fc(x).to(torch.float32)", FLOAT32, FLOAT32),
    ("probe = torch.zeros(3, dtype=torch.bool) * self.fc(x)", AUTOCAST_LOW, AUTOCAST_LOW),
    ("probe = deep(self.fc(x))", AUTOCAST_LOW, AUTOCAST_LOW),  # two functions down, on demand
])
def test_values_follow_the_op_table(line: str, cpu: int, cuda: int) -> None:
    value = _value(line)
    assert (value.cpu, value.cuda) == (cpu, cuda), value


def test_the_programs_own_low_cast_is_not_the_rewrites_to_undo() -> None:
    value = _value("probe = x.half()")
    assert value.on_cuda() is Precision.LOW and not value.low


SQUASH = """\
import torch
import torch.nn as nn
import torch.nn.functional as F


class Actor(nn.Module):
    def __init__(self):
        super().__init__()
        self.mean = nn.Linear(8, 2)

    def forward(self, state):
        z = self.mean(state)
{body}
        return log_prob.sum()


actor = Actor()
optimizer = torch.optim.Adam(actor.parameters())
for state in loader:
    optimizer.zero_grad()
    loss = actor(state)
    loss.backward()
    optimizer.step()
"""


def _rewritten(body: str) -> str:
    source = SQUASH.format(body=body).encode()
    return rewrite_source(source, Options()).source.decode()


@pytest.mark.parametrize(("body", "cast"), [
    ("        a = torch.tanh(z)\n        log_prob = torch.log(1 - a.pow(2) + 1e-6)",
     "a = torch.tanh(z.float())"),
    ("        a = z.tanh()\n        log_prob = -torch.log(1.0 - a * a + 1e-6)",
     "a = z.float().tanh()"),
    ("        a = F.tanh(z)\n        log_prob = torch.log(2 * (1 - a ** 2) + 1e-6)",
     "a = F.tanh(z.float())"),
    ("        log_prob = torch.log(1 - torch.tanh(z).pow(2) + 1e-6)",
     "torch.tanh(z.float())"),
    ("        p = torch.sigmoid(z)\n        log_prob = torch.log(1 - p + 1e-7)",
     "p = torch.sigmoid(z.float())"),
    ("        self.p = z.sigmoid()\n        log_prob = torch.log(1 - self.p + 1e-7)",
     "self.p = z.float().sigmoid()"),
])
def test_a_saturating_op_subtracted_from_one_runs_in_float32(body: str, cast: str) -> None:
    output = _rewritten(body)
    assert cast in output, output


@pytest.mark.parametrize("body", [
    # computed in float32 already
    "        a = torch.tanh(z.float())\n        log_prob = torch.log(1 - a.pow(2) + 1e-6)",
    # no difference from 1: nothing cancels
    "        a = torch.tanh(z)\n        log_prob = torch.log(a.pow(2) + 1e-6)",
    # rebound to something else before the difference
    "        a = torch.tanh(z)\n        a = z * 2\n        log_prob = torch.log(1 - a + 1e-6)",
    # the difference is of another value
    "        a = torch.tanh(z)\n        y = state[:, :2]\n        log_prob = a * (1 - y)",
])
def test_no_cast_where_nothing_saturates_and_cancels(body: str) -> None:
    output = _rewritten(body)
    assert "with autocast():" in output  # rewritten
    assert body in output, output  # the forward's lines as they were


KFAC = (FIXTURES / "kfac_hook_statistics" / "input.py").read_text()
BACKWARD = KFAC.replace(
    "            layer.register_forward_pre_hook(self._save_input)\n",
    "            layer.register_forward_pre_hook(self._save_input)\n"
    "            layer.register_full_backward_hook(self._save_grad_output)\n",
).replace(
    "    @torch.no_grad()\n",
    "    def _save_grad_output(self, module, grad_input, grad_output):\n"
    "        g = grad_output[0]\n"
    "        self.gradients[module] = g.t() @ g\n\n"
    "    @torch.no_grad()\n",
)


def test_backward_hook_statistics_leave_a_float16_rewrite_alone() -> None:
    assert BACKWARD != KFAC and "_save_grad_output(self, module" in BACKWARD
    result = rewrite_source(BACKWARD.encode(), Options())
    assert result.source == BACKWARD.encode()
    assert [f.code for f in result.findings if f.code == "AMP137"] == ["AMP137"]


def test_bfloat16_scales_no_loss_so_the_hooks_statistics_stay_right() -> None:
    result = rewrite_source(BACKWARD.encode(), Options(dtype="bfloat16"))
    output = result.source.decode()
    assert "with autocast(" in output and "AMP137" not in {f.code for f in result.findings}
    assert "torch.linalg.eigh(self.covariances[layer].float())" in output


def test_forward_hook_statistics_are_cast_where_they_are_decomposed() -> None:
    output = rewrite_source(KFAC.encode(), Options()).source.decode()
    assert "torch.linalg.eigh(self.covariances[layer].float())" in output
    assert "self.covariances[module] = a.t() @ a / a.size(0)\n" in output  # a dict: no cast
