"""The author's autocast is theirs in every spelling: kept in a variable or attribute, made by a
factory (`functools.partial`, a lambda, a helper, a `@contextmanager`), chosen against an FP32
arm (`nullcontext`, `suppress`), handed to a function. Where it covers training the file is
linted, never wrapped again; where it covers evaluation only, training is rewritten and the
author's region kept."""

from __future__ import annotations

import pytest

from amprewrite.engine import rewrite_source
from amprewrite.options import Options

TRAIN = '''\
import contextlib
import functools
from contextlib import nullcontext, suppress
from functools import partial

import torch

{setup}
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train(loader, {parameter}):
    for x, y in loader:
        optimizer.zero_grad()
        with {entry}:
            loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
'''

SPELLINGS = {
    "partial": ('amp_autocast = partial(torch.autocast, device_type="cpu", '
                "dtype=torch.bfloat16)", "amp_autocast()"),
    "functools.partial of torch.cuda.amp": (
        "amp_autocast = functools.partial(torch.cuda.amp.autocast, dtype=torch.bfloat16)",
        "amp_autocast()"),
    "suppress, then partial behind a flag": (
        "amp_autocast = suppress\nif use_amp:\n    amp_autocast = partial(torch.autocast, "
        '"cuda")', "amp_autocast()"),
    "nullcontext as the FP32 arm": (
        'ctx = nullcontext() if device == "cpu" else torch.autocast(device_type=device)',
        "ctx"),
    "contextlib.nullcontext, the other way round": (
        'ctx = torch.autocast("cuda") if use_amp else contextlib.nullcontext()', "ctx"),
    "a context kept in a variable": ('ctx = torch.autocast("cpu", dtype=torch.bfloat16)',
                                     "ctx"),
    "the class itself": ("ac = torch.autocast", 'ac("cuda")'),
    "a lambda": ('make_ctx = lambda: torch.autocast("cuda")', "make_ctx()"),
    "a helper returning one": (
        'def get_autocast():\n    return torch.autocast("cuda", enabled=use_amp)',
        "get_autocast()"),
    "a contextmanager entering one": (
        "@contextlib.contextmanager\ndef maybe_autocast():\n    if use_amp:\n"
        '        with torch.autocast("cuda"):\n            yield\n    else:\n        yield',
        "maybe_autocast()"),
    "a parameter, passed by keyword": (
        'amp_autocast = partial(torch.autocast, "cuda")\n\n\ndef main(loader):\n'
        "    train(loader, amp_autocast=amp_autocast)", "amp_autocast()"),
}


def _source(setup: str, entry: str) -> str:
    parameter = "amp_autocast=suppress" if "main(" in setup else "flag=None"
    return TRAIN.format(setup=f'device = "cpu"\nuse_amp = True\n{setup}', entry=entry,
                        parameter=parameter)


def _rewrite(source: str) -> tuple[str, list[str]]:
    result = rewrite_source(source.encode(), Options())
    return result.source.decode(), [f.code for f in result.findings]


@pytest.mark.parametrize(("setup", "entry"), SPELLINGS.values(), ids=list(SPELLINGS))
def test_a_training_autocast_in_every_spelling_is_the_authors(setup: str, entry: str) -> None:
    output, codes = _rewrite(_source(setup, entry))
    assert "AMP002" in codes or "AMP401" in codes
    assert "AMP100" not in codes and "AMP101" not in codes
    assert "amprewrite_runtime" not in output and "GradScaler" not in output


METHODS = '''\
import torch


class Trainer:
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer
        self.autocast = torch.autocast("cpu", dtype=torch.bfloat16)

    def amp(self):
        return torch.autocast("cpu", dtype=torch.bfloat16)

    def step(self, x, y):
        self.optimizer.zero_grad()
        with {entry}:
            loss = ((self.model(x) - y) ** 2).mean()
        loss.backward()
        self.optimizer.step()
'''


@pytest.mark.parametrize("entry", ["self.autocast", "self.amp()"])
def test_an_autocast_kept_on_the_object_is_the_authors(entry: str) -> None:
    _, codes = _rewrite(METHODS.format(entry=entry))
    assert "AMP002" in codes and "AMP101" not in codes


EVALUATION = '''\
import torch
from contextlib import nullcontext


class Trainer:
    def __init__(self, model, optimizer, device):
        self.model, self.optimizer = model, optimizer
        self.eval_ctx = {context}

    def fit(self, loader):
        for x, y in loader:
            self.optimizer.zero_grad()
            loss = ((self.model(x) - y) ** 2).mean()
            loss.backward()
            self.optimizer.step()

    @torch.no_grad()
    def evaluate(self, x):
        with self.eval_ctx:
            return self.model(x)
'''


@pytest.mark.parametrize("context", [
    'torch.autocast("cpu", dtype=torch.bfloat16)',
    'nullcontext() if device == "cpu" else torch.autocast("cuda", dtype=torch.bfloat16)',
])
def test_an_evaluation_autocast_kept_in_an_attribute_is_not_wrapped_again(context: str
                                                                          ) -> None:
    output, codes = _rewrite(EVALUATION.format(context=context))
    assert "AMP002" not in codes
    assert {"AMP144", "AMP101", "AMP102", "AMP104"} <= set(codes)
    assert 'autocast(dtype="bfloat16")' in output  # the author's dtype for training
    evaluate = output.split("def evaluate")[1]
    assert "autocast" not in evaluate.replace("self.eval_ctx", "")  # kept, not nested


def test_an_autocast_built_and_never_entered_here_counts_as_training() -> None:
    """`ctx.__enter__()`: where it is entered is not followed, so the file is left alone."""
    source = _source('ctx = torch.autocast("cuda")', "torch.no_grad()").replace(
        "optimizer.zero_grad()", "optimizer.zero_grad()\n        ctx.__enter__()")
    _, codes = _rewrite(source)
    assert "AMP002" in codes and "AMP101" not in codes


def test_a_disabled_autocast_is_no_mixed_precision() -> None:
    """`autocast(enabled=False)` guards float32 code: the script trains in FP32."""
    _, codes = _rewrite(_source('ctx = torch.autocast("cuda", enabled=False)', "ctx"))
    assert "AMP002" not in codes and "AMP101" in codes


def test_an_evaluation_autocast_from_a_helper_leaves_training_to_rewrite() -> None:
    """The helper's autocast is entered in evaluation only: the training step trained in
    FP32 and is rewritten, the evaluation kept under the author's autocast alone."""
    source = '''\
import torch


def eval_autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16)


model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
    with torch.no_grad(), eval_autocast():
        print(model(x).mean())
'''
    output, codes = _rewrite(source)
    assert "AMP002" not in codes and {"AMP144", "AMP101"} <= set(codes)
    assert "AMP106" not in codes  # the author's evaluation region, not wrapped again
    assert output.count("with torch.no_grad(), eval_autocast():") == 1
