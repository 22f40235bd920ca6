"""A script's own AMP behind its flag is kept as written, and a finding names the flag that
turns it on and says whether the script trains in FP32 without it (AMP611)."""

from __future__ import annotations

import pytest

from amprewrite.engine import rewrite_source
from amprewrite.options import Options

SCRIPT = '''\
import argparse
from contextlib import suppress
from functools import partial

import torch

parser = argparse.ArgumentParser()
{options}
args = parser.parse_args()
use_amp = False


def main():
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
{setup}
    for x, y in loader:
        optimizer.zero_grad()
{step}
'''

SCALED = ("        scaler.scale(loss).backward()\n        scaler.step(optimizer)\n"
          "        scaler.update()")
ENTERED = "        with {autocast}:\n            loss = ((model(x) - y) ** 2).mean()\n" + SCALED


def _script(options: str, setup: str, step: str) -> str:
    return SCRIPT.format(options=options, setup="\n".join("    " + line for line in setup.split(
        "\n")), step=step)


def _flag(source: str) -> list[str]:
    result = rewrite_source(source.encode(), Options())
    assert not any(f.code in ("AMP100", "AMP101") for f in result.findings)  # kept: the author's
    return [f.message for f in result.findings if f.code == "AMP611"]


OFF = "turns this script's own mixed precision on; by default it trains in FP32"
CASES = {
    "enabled= from a store_true option": (
        'parser.add_argument("--use_amp", action="store_true")',
        "scaler = torch.amp.GradScaler(enabled=args.use_amp)",
        ENTERED.format(autocast='torch.autocast("cuda", enabled=args.use_amp)'),
        f"`--use_amp` (`args.use_amp`) {OFF}"),
    "negated: --noamp": (
        'parser.add_argument("--noamp", action="store_true")',
        "scaler = torch.amp.GradScaler(enabled=not args.noamp)",
        ENTERED.format(autocast='torch.autocast("cuda", enabled=not args.noamp)'),
        "`--noamp` (`args.noamp`) turns this script's own mixed precision off; by default it "
        "trains in mixed precision"),
    "if args.amp around both, dest from a dashed option": (
        'parser.add_argument("--use-amp", default=False, action="store_true")',
        "if args.use_amp:\n    scaler = torch.amp.GradScaler()", """\
        if args.use_amp:
            with torch.autocast("cuda"):
                loss = ((model(x) - y) ** 2).mean()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            optimizer.step()""",
        f"`--use-amp` (`args.use_amp`) {OFF}"),
    "timm's layout: suppress, then a partial behind the flag": (
        'parser.add_argument("--amp", action="store_true", help="mixed precision")',
        "amp_autocast = suppress\nscaler = None\nif args.amp and torch.cuda.is_available():\n"
        '    amp_autocast = partial(torch.autocast, device_type="cuda")\n'
        "    scaler = torch.amp.GradScaler()", """\
        with amp_autocast():
            loss = ((model(x) - y) ** 2).mean()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()""",
        f"`--amp` (`args.amp`) {OFF}"),
    "a gate the scaler does not share": (
        'parser.add_argument("--amp", type=int, default=1)',
        'ctx = torch.autocast("cuda") if args.amp else suppress()\n'
        "scaler = torch.amp.GradScaler(enabled=bool(args.amp))",
        ENTERED.format(autocast="ctx"),
        None),
    "a module constant": (
        "",
        "scaler = torch.amp.GradScaler(enabled=use_amp)",
        ENTERED.format(autocast='torch.autocast("cuda", enabled=use_amp)'),
        f"`use_amp` {OFF}"),
}


@pytest.mark.parametrize(("options", "setup", "step", "message"), CASES.values(),
                         ids=list(CASES))
def test_the_flag_in_front_of_the_authors_amp_is_named(options: str, setup: str, step: str,
                                                        message: str | None) -> None:
    found = _flag(_script(options, setup, step))
    assert found == ([message] if message else [])


def test_an_option_defaulting_on_says_so() -> None:
    options = 'parser.add_argument("--amp", type=int, default=1)'
    setup = "scaler = torch.amp.GradScaler(enabled=args.amp)"
    step = ENTERED.format(autocast='torch.autocast("cuda", enabled=args.amp)')
    assert _flag(_script(options, setup, step)) == [
        "`--amp` (`args.amp`) turns this script's own mixed precision on; by default it "
        "trains in mixed precision"]


@pytest.mark.parametrize(("setup", "autocast"), [
    ("scaler = torch.amp.GradScaler()", 'torch.autocast("cuda")'),
    ("scaler = torch.amp.GradScaler(enabled=args.amp)", 'torch.autocast("cuda")'),
    ("scaler = torch.amp.GradScaler(enabled=amp_dtype == torch.float16)",
     'torch.autocast("cuda", dtype=amp_dtype)'),
], ids=["no flag", "only the scaler behind it", "a dtype test, not a flag"])
def test_amp_not_behind_one_flag_gets_no_flag_finding(setup: str, autocast: str) -> None:
    options = 'parser.add_argument("--amp", action="store_true")'
    assert _flag(_script(options, setup, ENTERED.format(autocast=autocast))) == []


def test_a_flag_on_the_object_is_named_without_a_default() -> None:
    source = '''\
import torch


class Trainer:
    def __init__(self, model, optimizer, use_amp):
        self.model, self.optimizer, self.use_amp = model, optimizer, use_amp
        self.scaler = torch.amp.GradScaler(enabled=self.use_amp)

    def step(self, x, y):
        self.optimizer.zero_grad()
        with torch.autocast("cuda", enabled=self.use_amp):
            loss = ((self.model(x) - y) ** 2).mean()
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
'''
    assert _flag(source) == [
        "`self.use_amp` turns this script's own mixed precision on; kept as written"]
