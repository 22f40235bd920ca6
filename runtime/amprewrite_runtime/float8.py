"""Float8 training through torchao: `model = float8_training(model)` where the model is built.

The choice is made at run time, as bfloat16's is: float8 on a CUDA GPU with float8 tensor
cores (compute capability 8.9 or newer: Ada, Hopper, Blackwell) where torchao imports,
bfloat16 otherwise. `AMPREWRITE_DTYPE=float8` forces it (emulated where the device has no
float8 matrix multiplies, the CPU included); another `AMPREWRITE_DTYPE`, or
`AMPREWRITE_OPT_LEVEL=O0`, leaves the model as it is. One line on standard error says which.

The conversion swaps `nn.Linear` layers for torchao's `Float8Linear`, which keeps the same
`weight` and `bias` parameters (an optimizer built before still steps them, and checkpoints
stay loadable by the float32 script), except those float8 GEMMs cannot serve or torchao
advises against: dimensions not divisible by 16, the model's last linear layer (its output
head) and the projections `nn.MultiheadAttention` reads `.weight` of directly. Those compute
in bfloat16 under autocast, like the rest of the model.

With FSDP2 (`fsdp=True`, before `fully_shard`), weights are all-gathered in float8 and their
scales are computed for all layers at once after each optimizer step the runtime's
`GradScaler.step` takes, as torchao's recipe wants.
"""

from __future__ import annotations

import importlib.util
import sys
import weakref
from collections.abc import Callable
from typing import TypeVar

import torch
from torch import nn

from amprewrite_runtime.policy import ENV_DTYPE, current_policy

M = TypeVar("M", bound=nn.Module)
FLOAT8_CAPABILITY = (8, 9)  # the first compute capability with float8 tensor cores
_FSDP_MODELS: weakref.WeakSet[nn.Module] = weakref.WeakSet()  # scales precomputed per step


def float8_training(model: M, *, fsdp: bool = False) -> M:
    """`model` with its linear layers converted to float8 training where float8 is chosen
    here (see the module docstring), else `model` as it is; `fsdp`: it is then sharded by
    `fully_shard` (float8 all-gather)."""
    if not float8_chosen():
        return model
    emulate = float8_emulated()
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    takes = _float8_filter(model)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    converted = sum(takes(m, "") for m in linears)
    if not converted:
        _say(f"bfloat16, not float8: none of the model's {len(linears)} linear layers can take "
             "it (dimensions divisible by 16, not the output head)" if linears else
             "bfloat16, not float8: the model has no linear layer")
        return model
    config = Float8LinearConfig(emulate=emulate, enable_fsdp_float8_all_gather=fsdp)
    model = convert_to_float8_training(model, module_filter_fn=takes, config=config)
    if fsdp:
        _FSDP_MODELS.add(model)
    how = "emulated, no float8 matrix multiplies on this device" if emulate else "torchao"
    _say(f"float8 ({how}): {converted} of {len(linears)} linear layers converted, "
         "the rest in bfloat16")
    return model


def _float8_filter(model: nn.Module) -> Callable[[nn.Module, str], bool]:
    """torchao's `module_filter_fn` for `model`: whether a linear layer trains in float8."""
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    kept = {id(m.out_proj) for m in model.modules() if isinstance(m, nn.MultiheadAttention)}
    if linears:
        kept.add(id(linears[-1]))  # the output head, which torchao advises to keep

    def takes(module: nn.Module, fqn: str) -> bool:
        return (isinstance(module, nn.Linear) and id(module) not in kept
                and module.in_features % 16 == 0 and module.out_features % 16 == 0)

    return takes


def precompute_scales(optimizer: torch.optim.Optimizer) -> None:
    """After `optimizer` stepped: the float8 scales of the FSDP2 models it trains, computed
    for all their layers in one all-reduce (`precompute_float8_dynamic_scale_for_fsdp`)."""
    if not _FSDP_MODELS:
        return
    from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

    stepped = {id(p) for group in optimizer.param_groups for p in group["params"]}
    for model in list(_FSDP_MODELS):
        if any(id(p) in stepped for p in model.parameters()):
            precompute_float8_dynamic_scale_for_fsdp(model)


def float8_chosen(*, quiet: bool = False) -> bool:
    """Whether float8 is chosen here (see the module docstring), saying why not when not
    (unless `quiet`)."""
    reason = _not_chosen()
    if reason and not quiet:
        _say(f"bfloat16, not float8: {reason}")
    return not reason


def float8_emulated() -> bool:
    """Whether float8 is emulated here: forced on a device without float8 matrix multiplies."""
    return not _float8_device()


def _float8_device() -> bool:
    """Whether training here runs on a GPU with float8 tensor cores."""
    return (current_policy().device_type() == "cuda" and torch.cuda.is_available()
            and torch.cuda.get_device_capability() >= FLOAT8_CAPABILITY)


def _not_chosen() -> str:
    """Why float8 is not used here; empty: it is."""
    policy = current_policy()
    forced = policy.overrides.float8
    if policy.opt_level() != "O1":
        return f"opt level {policy.opt_level()} (float8 training is O1's)"
    if forced is False:
        dtype = str(policy.low_precision_dtype()).removeprefix("torch.")
        return f"{ENV_DTYPE} asks for {dtype}"
    if importlib.util.find_spec("torchao") is None:
        if forced:
            raise RuntimeError(f"{ENV_DTYPE}=float8 needs torchao: "
                               "pip install 'amprewrite[float8]' (or torchao)")
        return "torchao is not installed (pip install 'amprewrite[float8]')"
    if not forced and not _float8_device():
        return _no_float8_device()
    return ""


def _no_float8_device() -> str:
    if current_policy().device_type() != "cuda" or not torch.cuda.is_available():
        return (f"no float8 matrix multiplies on {current_policy().device_type()} "
                f"({ENV_DTYPE}=float8 emulates them)")
    major, minor = torch.cuda.get_device_capability()
    return f"GPU compute capability {major}.{minor}, float8 needs 8.9 or newer"


def _say(line: str) -> None:
    print(f"amprewrite: {line}", file=sys.stderr, flush=True)
