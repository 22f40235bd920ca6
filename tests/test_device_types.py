"""The `torch.cuda.amp` -> `torch.amp` migration writes the script's own device type where it is
provably bound at the call, else "cuda" as before."""

from __future__ import annotations

import ast

import pytest

from amprewrite.engine import rewrite_source
from amprewrite.options import Options

CALL = "scaler = torch.cuda.amp.GradScaler()"


def _device_of(source: str) -> str:
    """The device type the migrated `GradScaler(...)` was given."""
    output = rewrite_source(source.encode(), Options()).source.decode()
    compile(output, "t.py", "exec")
    line = next(line for line in output.splitlines() if "GradScaler(" in line)
    return line.split("GradScaler(", 1)[1].rstrip(")")


def _module(before: str, call: str = CALL) -> str:
    return f"import torch\n{before}\n{call}\n"


def _function(before: str, params: str = "model") -> str:
    return f"import torch\n\n\ndef train({params}):\n    {before}\n    {CALL}\n"


CASES = {
    "torch.device at module level": (_module('device = torch.device("cpu")'), "device.type"),
    "torch.device chosen by availability": (_module(
        'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")'),
        "device.type"),
    "a device-type string": (_module('device_type = "cuda" if torch.cuda.is_available() '
                                     'else "cpu"'), "device_type"),
    "a string taken from the device": (_module(
        'dev = torch.device("cpu")\ndevice_type = dev.type'), "device_type"),
    "the module's device, in a function": (
        'import torch\ndevice = torch.device("cpu")\n\n\ndef train():\n    ' + CALL + "\n",
        "device.type"),
    "a local device": (_function('device = torch.device("cuda")'), "device.type"),
    "a local shadows the module's": (
        _function('device = "cpu"').replace("import torch\n", 'import torch\nd = "cuda"\n'),
        "device"),
    "self.device from __init__": ('''\
import torch


class Trainer:
    def __init__(self):
        self.device = torch.device("cpu")

    def setup(self):
        self.scaler = torch.cuda.amp.GradScaler()
''', "self.device.type"),
    # not provable: "cuda" as before
    "a parameter": (_function("pass", params="model, device"), '"cuda"'),
    "a parameter named like the module's device": (
        'import torch\ndevice = torch.device("cpu")\n\n\ndef train(device):\n    '
        + CALL + "\n", '"cuda"'),
    "bound on one path only": (_module('if torch.cuda.is_available():\n    device = "cuda"'),
                               '"cuda"'),
    "a loop variable too": (_module('device = "cpu"\nfor device in ["cuda", "cpu"]:\n    pass'),
                            '"cuda"'),
    "an index, not a type": (_module('device = "cuda:0"'), '"cuda"'),
    "a command-line string": (_module("device = args.device"), '"cuda"'),
    "bound after the call": (_module(CALL, 'device = torch.device("cpu")'), '"cuda"'),
    "two devices": (_module('a = torch.device("cpu")\nb = torch.device("cuda")'), '"cuda"'),
    "self.device outside __init__": ('''\
import torch


class Trainer:
    def to(self, device):
        self.device = torch.device(device)

    def setup(self):
        self.scaler = torch.cuda.amp.GradScaler()
''', '"cuda"'),
}


@pytest.mark.parametrize(("source", "device"), CASES.values(), ids=list(CASES))
def test_the_migration_uses_the_scripts_device_where_it_is_bound(source: str, device: str
                                                                  ) -> None:
    assert _device_of(source) == device


def test_the_cpu_namespace_stays_on_the_cpu() -> None:
    source = _module('device = torch.device("cuda")',
                     "with torch.cpu.amp.autocast():\n    pass\n" + CALL)
    output = rewrite_source(source.encode(), Options()).source.decode()
    assert 'torch.amp.autocast("cpu")' in output and "GradScaler(device.type)" in output


def test_a_partial_of_the_deprecated_autocast_is_migrated_with_its_arguments() -> None:
    """timm's `partial(autocast, ...)`: the import alone was rewritten, and the partial then
    made `torch.amp.autocast(...)` without a device type (a TypeError at the first step)."""
    source = ('import torch\nfrom functools import partial\nfrom torch.cuda.amp import autocast\n'
              'device = torch.device("cpu")\n'
              "amp_autocast = partial(autocast, True, dtype=torch.bfloat16)\n")
    output = rewrite_source(source.encode(), Options()).source.decode()
    assert "from torch.amp import autocast" in output
    assert ("amp_autocast = partial(autocast, device.type, enabled=True, dtype=torch.bfloat16)"
            in ast.unparse(ast.parse(output)))  # however the line is wrapped


@pytest.mark.parametrize("value", [
    "amp_autocast = autocast if use_amp else nullcontext",
    "factories = [autocast]",
])
def test_a_deprecated_name_used_as_a_value_keeps_the_file_as_written(value: str) -> None:
    source = ("import torch\nfrom contextlib import nullcontext\nfrom torch.cuda.amp import "
              f"autocast\n\nuse_amp = True\n{value}\nwith autocast():\n    pass\n")
    result = rewrite_source(source.encode(), Options())
    assert not result.changed
    [kept] = [f for f in result.findings if f.code == "AMP403"]
    assert "`autocast` is used here as a value, not called" in kept.message
