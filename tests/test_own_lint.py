"""The rewrite passes its own lint: what it leaves with its own finding (a cast by hand,
AMP140) is reported the same way by `--check` afterwards, not as an AMP mistake (AMP608)."""

from __future__ import annotations

import itertools

import pytest

from amprewrite.catalog import Severity
from amprewrite.engine import rewrite_source
from amprewrite.options import Options

_SCRIPT = """import torch
import torch.nn as nn
import torch.nn.functional as F

half = True
model = nn.Linear(4, 2)
{cast}
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x = torch.randn(8, 4)
    y = torch.randint(0, 2, (8,))
    optimizer.zero_grad()
    out = model(x)
    loss = F.cross_entropy(out, y)
    loss.backward()
    optimizer.step()
"""
_CASTS = ("if half:\n    model.half()", "model = model.half()", "model.bfloat16()",
          "if half:\n    model.to(torch.float16)", "model.to(dtype=torch.bfloat16)")
_OPTIONS = (Options(), Options(plain=True), Options(dtype="bfloat16"),
            Options(plain=True, dtype="float16"))


@pytest.mark.parametrize(("cast", "options"), list(itertools.product(_CASTS, _OPTIONS)))
def test_a_rewritten_script_passes_its_own_check(cast: str, options: Options) -> None:
    first = rewrite_source(_SCRIPT.format(cast=cast).encode(), options)
    assert first.changed
    assert "AMP140" in {f.code for f in first.findings}
    second = rewrite_source(first.source, options)
    assert not second.changed
    assert [f for f in second.findings if f.severity is Severity.LINT] == []
    assert "AMP140" in {f.code for f in second.findings}


_HAND_WRITTEN = """import torch

model = torch.nn.Linear(8, 2).{cast}
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
for x, y in batches:
    optimizer.zero_grad()
    with torch.autocast("cuda"):
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""


@pytest.mark.parametrize(("cast", "harm"), [
    ("half()", "GradScaler cannot unscale float16 gradients"),
    ("bfloat16()", "the optimizer would step bfloat16 weights, losing small updates"),
    ("to(torch.bfloat16)", "the optimizer would step bfloat16 weights, losing small updates"),
])
def test_a_hand_written_cast_next_to_a_scaler_is_amp608_in_its_dtype(cast: str, harm: str) -> None:
    result = rewrite_source(_HAND_WRITTEN.format(cast=cast).encode(), Options())
    [finding] = [f for f in result.findings if f.code == "AMP608"]
    assert finding.message == (f"`torch.nn.Linear(8, 2).{cast}` casts by hand next to a grad "
                               f"scaler; {harm}")


@pytest.mark.parametrize(("line", "reported"), [
    ("model.half().float()", False),  # cast back to float32 at once: a rounding
    ("model.half().to(torch.float32)", False),
    ('ckpt = {"model": deepcopy(model).half(), "scaler": scaler.state_dict()}', False),
    ("ckpts = [deepcopy(model).half()]", False),
    ("copy = deepcopy(model).half()", True),  # bound to a name: it may be trained
    ("model.half()", True),
    ('ckpt = {"model": model.half()}', True),  # the trained model itself, cast in place
])
def test_a_half_copy_no_step_sees_is_not_amp608(line: str, reported: bool) -> None:
    source = ("from copy import deepcopy\n"
              + _HAND_WRITTEN.format(cast="float()") + line + "\n")
    result = rewrite_source(source.encode(), Options())
    assert any(f.code == "AMP608" for f in result.findings) == reported, result.findings
