"""O0 takes out only what amprewrite added: every statement of the author's stays, on a line
shared with the tool's own, and so do the author's `autocast(enabled=False)` guards."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amprewrite.engine import rewrite_source
from amprewrite.options import Options

O0 = Options(opt_level="O0")

_HEAD = """import torch
import torch.nn as nn
import torch.nn.functional as F

model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
count = 0
for step in range(3):
    x = torch.randn(8, 4)
    y = torch.randint(0, 2, (8,))
"""
_STEP = ("optimizer.zero_grad()", "out = model(x)", "loss = F.cross_entropy(out, y)",
         "loss.backward()", "optimizer.step()", "count += 1")


@st.composite
def _training_steps(draw: st.DrawFn) -> str:
    """The training step's statements in order, some sharing a line (`a; b`)."""
    joins = draw(st.lists(st.booleans(), min_size=len(_STEP) - 1, max_size=len(_STEP) - 1))
    lines = [_STEP[0]]
    for statement, joined in zip(_STEP[1:], joins, strict=True):
        if joined:
            lines[-1] += f"; {statement}"
        else:
            lines.append(statement)
    return _HEAD + "".join(f"    {line}\n" for line in lines)


@settings(max_examples=40, deadline=None)
@given(_training_steps(), st.sampled_from([Options(), Options(plain=True)]))
def test_o0_gives_back_the_script_o1_rewrote(script: str, options: Options) -> None:
    rewritten = rewrite_source(script.encode(), options)
    assert rewritten.changed
    reverted = rewrite_source(rewritten.source, O0)
    assert reverted.source.decode() == script


_HAND_WRITTEN = """import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda"); count = 0
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda"):
        loss = torch.nn.functional.mse_loss(model(x), y)
    with torch.autocast("cuda", enabled=False):
        gram = torch.mm(x.float(), x.float().t())
    scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update(); count += 1
"""


def test_o0_keeps_the_authors_statements_on_a_line_and_its_guards() -> None:
    reverted = rewrite_source(_HAND_WRITTEN.encode(), O0).source.decode()
    assert reverted == """import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
count = 0
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    with torch.autocast("cuda", enabled=False):
        gram = torch.mm(x.float(), x.float().t())
    loss.backward(); optimizer.step(); count += 1
"""


def test_a_runtime_guard_keeps_the_import_it_needs() -> None:
    script = """import torch
from amprewrite_runtime import GradScaler, autocast

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = GradScaler()
for x, y in loader:
    with autocast():
        loss = torch.nn.functional.mse_loss(model(x), y)
    with autocast(enabled=False):
        gram = torch.mm(x.float(), x.float().t())
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""
    reverted = rewrite_source(script.encode(), O0).source.decode()
    assert reverted.splitlines()[:2] == ["import torch", "from amprewrite_runtime import autocast"]
    assert "    with autocast(enabled=False):\n        gram = " in reverted
    assert "GradScaler" not in reverted and "with autocast():" not in reverted
    again = rewrite_source(reverted.encode(), Options())  # the guard is not mixed precision
    assert again.changed and b"scaler.scale(loss).backward()" in again.source


_AUTHORS_STEP = """import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")


def evaluation_context():
    return torch.autocast("cuda", dtype=torch.float16)


def train_step(x, y):
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
{tail}"""


@pytest.mark.parametrize(("tail", "left"), [
    ("", "`torch.autocast(...)` is still called"),  # an autocast O0 cannot unwrap
    ("    return scaler.get_scale()\n", "`train_step()` no longer returns what it returned"),
])
def test_o0_leaves_the_authors_amp_it_cannot_take_out_whole(tail: str, left: str) -> None:
    source = _AUTHORS_STEP.replace("{tail}", tail)
    if tail:  # the step alone
        source = source.replace('def evaluation_context():\n    return torch.autocast("cuda", '
                                'dtype=torch.float16)\n\n\n', "")
    result = rewrite_source(source.encode(), O0)
    assert not result.changed
    assert [f.code for f in result.findings] == ["AMP425"]
    assert left in result.findings[0].message
