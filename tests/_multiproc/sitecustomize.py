"""Record nn.Linear output dtypes in every Python process started with this on PYTHONPATH.

`tests/execution.py` observes the forward passes of the script's own process only; the worker
processes of `torch.multiprocessing.spawn` are new interpreters. Putting this directory on
`PYTHONPATH` makes each of them (children inherit the environment) import this module at
start-up. When `AMPREWRITE_FORWARD_LOG` names a file, a global forward hook is registered as
soon as the process imports torch (processes that never import torch, such as the resource
tracker, pay nothing), and every nn.Linear forward appends one line to that file:

    <pid> <rank or -> <output dtype> <grad enabled: 1|0> <autocast enabled: 1|0>
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

_LOG = os.environ.get("AMPREWRITE_FORWARD_LOG")


def _install(torch) -> None:
    import torch.distributed as dist

    def hook(module, inputs, output):
        if not isinstance(module, torch.nn.Linear) or not isinstance(output, torch.Tensor):
            return None
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else "-"
        line = (f"{os.getpid()} {rank} {output.dtype} {int(torch.is_grad_enabled())} "
                f"{int(torch.is_autocast_enabled(output.device.type))}\n")
        with open(_LOG, "a", encoding="utf-8") as fh:
            fh.write(line)
        return None

    torch.nn.modules.module.register_module_forward_hook(hook)


class _AfterTorchImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps torch's loader so the hook goes in once torch is loaded."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_install(module):
            exec_module(module)
            _install(module)

        spec.loader.exec_module = exec_then_install
        return spec


if _LOG:
    sys.meta_path.insert(0, _AfterTorchImport())
