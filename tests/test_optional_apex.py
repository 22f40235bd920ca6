"""An optional apex FP16 path (FP16_Optimizer behind `--fp16`) with a plain FP32 default: the
default training step is rewritten, the apex path kept as written, and the grad scaler off
(O0) wherever the flag takes that path (AMP612)."""

from __future__ import annotations

import pytest

from amprewrite.engine import rewrite_source
from amprewrite.options import Options

ONE_FUNCTION = '''\
import argparse

import torch
{module_import}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fp16", action="store_true")
    args = parser.parse_args()
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    if {test}:
{local_import}
        model.half()
        optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)
    for x, y in loader:
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        if {test}:
            optimizer.backward(loss)
        else:
            loss.backward()
        optimizer.step()
'''

IMPORTS = {
    "a try/except ImportError at the top": (
        "try:\n    from apex.fp16_utils import FP16_Optimizer\nexcept ImportError:\n"
        "    FP16_Optimizer = None", "        pass"),
    "imported behind the flag": ("", "        from apex.fp16_utils import FP16_Optimizer"),
    "apex.optimizers' FP16_Optimizer": ("from apex.optimizers import FP16_Optimizer",
                                        "        pass"),
}


def _rewrite(source: str, **options: object) -> tuple[str, list[str]]:
    result = rewrite_source(source.encode(), Options(**options))  # type: ignore[arg-type]
    output = result.source.decode()
    compile(output, "t.py", "exec")
    return output, [f.code for f in result.findings]


@pytest.mark.parametrize(("module_import", "local_import"), IMPORTS.values(), ids=list(IMPORTS))
@pytest.mark.parametrize(("test", "level"), [
    ("args.fp16", '"O0" if args.fp16 else "O1"'),
    ("not args.fp32", '"O0" if not args.fp32 else "O1"'),
], ids=["flag", "negated flag"])
def test_the_default_step_is_rewritten_and_the_apex_path_kept(
        module_import: str, local_import: str, test: str, level: str) -> None:
    source = ONE_FUNCTION.format(module_import=module_import, local_import=local_import,
                                 test=test)
    output, codes = _rewrite(source)
    assert "AMP002" not in codes and {"AMP612", "AMP101", "AMP102", "AMP104"} <= set(codes)
    assert f"scaler = GradScaler({level})" in output
    assert "optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)" in output
    assert "optimizer.backward(loss)" in output and "scaler.step(optimizer)" in output


def test_at_o2_the_flag_turns_the_scaler_off_too() -> None:
    source = ONE_FUNCTION.format(module_import="", test="args.fp16",
                                 local_import=IMPORTS["imported behind the flag"][1])
    output, _ = _rewrite(source, opt_level="O2")
    assert 'GradScaler("O0" if args.fp16 else "O2")' in output


def test_a_loop_in_another_function_gets_the_level_where_the_optimizer_is_built() -> None:
    """The scaler is a module global (two functions use it) and `args` exists only in
    `main`: the level goes to `scaler.initialize(...)` after the optimizer is built."""
    source = '''\
import argparse

import torch
from apex.optimizers import FP16_Optimizer


def train(model, optimizer, args, loader):
    for x, y in loader:
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        if args.fp16:
            optimizer.backward(loss)
        else:
            loss.backward()
        optimizer.step()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fp16", action="store_true")
    args = parser.parse_args()
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    if args.fp16:
        optimizer = FP16_Optimizer(optimizer)
    train(model, optimizer, args, loader)
'''
    output, codes = _rewrite(source)
    assert "scaler = GradScaler()\n" in output and "AMP612" in codes
    assert ('    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)\n'
            '    scaler.initialize(model, optimizer, opt_level="O0" if args.fp16 else "O1")\n'
            ) in output


@pytest.mark.parametrize("setup", [
    "    model.half()\n    optimizer = FP16_Optimizer(optimizer)\n",
    "    if args.fp16:\n        model = apex.fp16_utils.network_to_half(model)\n"
    "    if args.fast:\n        optimizer = FP16_Optimizer(optimizer)\n",
], ids=["not behind a flag", "behind two different flags"])
def test_apex_not_behind_one_flag_is_the_files_mixed_precision(setup: str) -> None:
    source = ONE_FUNCTION.format(module_import="import apex\nfrom apex.optimizers import "
                                 "FP16_Optimizer", local_import="        pass", test="args.fp16")
    gated = ("    if args.fp16:\n        pass\n        model.half()\n"
             "        optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)\n")
    assert gated in source
    result = rewrite_source(source.replace(gated, setup).encode(), Options())
    assert not result.changed
    assert "AMP002" in [f.code for f in result.findings]


def test_plain_leaves_the_file_as_written_and_says_why() -> None:
    source = ONE_FUNCTION.format(module_import="", test="args.fp16",
                                 local_import=IMPORTS["imported behind the flag"][1])
    result = rewrite_source(source.encode(), Options(plain=True))
    assert not result.changed
    [kept] = [f for f in result.findings if f.code == "AMP612"]
    assert "`--plain` cannot turn a grad scaler off on that path" in kept.message
