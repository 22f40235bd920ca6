"""Run a training script under observation and write what it did as JSON.

    python tests/_bootstrap.py OUT.json SCRIPT [ARGS...]

Used by `tests/execution.py` (see `run_script` there); not a test module itself.

The script runs in this process via `runpy.run_path(SCRIPT, run_name="__main__")`, as
`python SCRIPT ARGS...` would run it (`sys.argv`, `sys.path[0]` and `__file__` are set the
same way), after seeding and after installing these observers:

* `torch.Tensor.backward` (and direct `torch.autograd.backward` calls) record the value of
  every tensor backpropagated from, in call order. A loss that went through an *enabled*
  `torch.amp.GradScaler.scale` is recorded unscaled (the loss before scaling), so losses
  compare across FP32 and AMP runs whatever the scale; `backward_scaled` says which were.
* a global module forward hook records the output dtype of every `nn.Linear` / `nn.Conv*`
  forward, split by whether grad mode was on (training) or off (`no_grad` /
  `inference_mode`: evaluation), with whether autocast was active.
* optimizer steps are counted as *attempts*, numbered from 1 in call order: each
  `torch.amp.GradScaler.step(opt)` (of an enabled or disabled scaler; amprewrite_runtime's
  GradScaler goes through it when it scales) and each `opt.step()` called directly, whatever
  the dtype. An explicit `GradScaler.unscale_(opt)` already opens the attempt its step
  belongs to (it is where an enabled scaler looks for inf/NaN), so an attempt the script
  abandons after unscaling (a skip branch's `continue`) still counts. An attempt is *taken*
  when the optimizer's own `step()` ran, *skipped* otherwise (the scaler found inf/NaN, or
  the script skipped it); `update()` closes what is still open. Also recorded: the scale
  after every `update()` of an enabled scaler, and every `LRScheduler.step()` after the one
  its constructor makes.
* overflow injection (`AMPREWRITE_TEST_OVERFLOW_AT=N`, removed from the script's
  environment): at attempt N, before anything looks at the gradients (before the unscale_
  that checks them, or before a direct `opt.step()`), one element of the first gradient of
  `opt` (first param group, first parameter with a dense gradient) becomes inf, as a float16
  overflow in backward would. Where that optimizer holds no gradient yet, the next attempt
  gets it. With an enabled grad scaler (a float16 rewrite) the step is skipped and the scale
  backs off; without one (FP32, bfloat16) the inf reaches the weights, so only float16 runs
  are injected in the tests.
* step replay (`AMPREWRITE_TEST_SKIP_AT=3,7`, removed likewise): the direct `opt.step()` of
  those attempts runs with every gradient of `opt` set aside (restored right after), so it
  changes nothing, as a grad scaler's skipped step does. An FP32 run told the attempts a
  float16 run skipped is that run's exact FP32 twin, which is what the tests compare with.

CUDA's defaults on the CPU (`AMPREWRITE_TEST_CUDA_DEFAULTS=1`, part of the harness's float16
environment): a `--plain` rewrite uses torch.amp with the device's defaults
(`torch.autocast(amp_device)`, `GradScaler(amp_device, enabled=amp_device == "cuda")`), which
`AMPREWRITE_DTYPE` cannot reach; with this set, a CPU autocast region opened without a dtype
runs in float16 and a CPU grad scaler the script (not torch, not amprewrite_runtime) creates
disabled is enabled, as on a GPU; and binary cross-entropy under autocast raises, as CUDA's
autocast makes it.

Another default device (`AMPREWRITE_TEST_DEVICE=cuda`, removed likewise; set by
`tests/execution.py` for runs on a GPU): tensors and modules created without a device are
created there, as under `torch.set_default_device`; a random op given a CPU generator draws
from it as on the CPU and its result is moved there. What a script written for the CPU does
with such tensors is done as its GPU version would do it: `.numpy()` copies to the CPU first,
and a `backward(gradient)` given a CPU tensor (a legacy `torch.FloatTensor([1])`) gets it
moved. A script that names its device keeps it. `forward_devices` counts the
Linear/Conv forwards by the device type of their output, so a caller can see where it ran.

The record is written when the script finishes, also when it raises (the traceback is kept
and the exit status is 1) or calls `sys.exit` (its status is kept).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import runpy
import sys
import threading
import time
import traceback
import warnings

MAX_ENTRIES = 5000  # cap on each recorded list; counters are not capped
OVERFLOW_ENV = "AMPREWRITE_TEST_OVERFLOW_AT"  # what run_script(overflow_at=N) sets
SKIP_ENV = "AMPREWRITE_TEST_SKIP_AT"  # what run_script(skip_at=[...]) sets
CUDA_DEFAULTS_ENV = "AMPREWRITE_TEST_CUDA_DEFAULTS"
DEVICE_ENV = "AMPREWRITE_TEST_DEVICE"

# torch without numpy warns at import; that noise is not the script's.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")


def _new_record(script: str, args: list[str]) -> dict:
    return {
        "script": script,
        "args": args,
        "exit_code": None,
        "error": None,  # formatted traceback when the script raised
        "error_type": None,
        "duration_s": None,
        # backward()
        "losses": [],  # float per scalar backward, in call order (unscaled)
        "backward_dtypes": [],  # dtype of each recorded tensor, parallel to losses
        "backward_scaled": [],  # bool per loss: came out of an enabled GradScaler.scale
        "backward_count": 0,  # all backward calls, scalar or not
        "nonscalar_backward_count": 0,  # backward on a non-scalar tensor (no loss recorded)
        # Linear / Conv forwards
        "linear_dtypes": [],  # output dtype of every forward, in order
        "train_dtypes": [],  # ... those run with grad enabled
        "eval_dtypes": [],  # ... those run with grad disabled (no_grad / inference_mode)
        "forwards": [],  # [module class, dtype, grad enabled, autocast enabled]
        "dtype_counts": {"train": {}, "eval": {}},
        "forward_count": 0,
        "forward_devices": {},  # device type of each forward's output: count
        # optimizer steps (see the module docstring)
        "optimizer_steps": 0,  # attempts
        "optimizer_steps_taken": 0,  # attempts whose optimizer.step() ran
        "skipped_at": [],  # 1-based attempt numbers not taken
        "scaler_updates": 0,  # update() calls of an enabled torch GradScaler
        "scales": [],  # the scale after each of those updates
        "scheduler_steps": 0,  # LRScheduler.step() calls, the constructor's own left out
        "overflow_at": None,  # the attempt asked for (AMPREWRITE_TEST_OVERFLOW_AT)
        "overflow_injected_at": None,  # the attempt whose gradient got the inf
        "truncated": False,  # some list hit MAX_ENTRIES
    }


def _append(record: dict, key: str, value) -> None:
    lst = record[key]
    if len(lst) < MAX_ENTRIES:
        lst.append(value)
    else:
        record["truncated"] = True


def _install_observers(record: dict) -> None:
    import torch
    import torch.nn as nn
    from torch.amp import grad_scaler
    from torch.nn.modules.conv import _ConvNd

    local = threading.local()

    def note_backward(tensor) -> None:
        record["backward_count"] += 1
        if not isinstance(tensor, torch.Tensor):
            return
        if tensor.numel() != 1:
            record["nonscalar_backward_count"] += 1
            return
        unscaled = getattr(tensor, "_amprewrite_unscaled", None)
        source = unscaled if isinstance(unscaled, torch.Tensor) else tensor
        with torch.no_grad():
            value = float(source.detach().float().reshape(()).item())
        _append(record, "losses", value)
        _append(record, "backward_dtypes", str(tensor.dtype))
        _append(record, "backward_scaled", unscaled is not None)

    original_tensor_backward = torch.Tensor.backward

    def tensor_backward(self, *args, **kwargs):
        depth = getattr(local, "depth", 0)
        if depth == 0:  # a torch function mode calls this again from inside (GPU runs)
            note_backward(self)
        local.depth = depth + 1
        try:
            return original_tensor_backward(self, *args, **kwargs)
        finally:
            local.depth = depth

    tensor_backward.__doc__ = original_tensor_backward.__doc__
    tensor_backward.__wrapped__ = original_tensor_backward
    torch.Tensor.backward = tensor_backward

    original_autograd_backward = torch.autograd.backward

    def autograd_backward(tensors, *args, **kwargs):
        # Tensor.backward calls torch.autograd.backward; only direct calls are new.
        if getattr(local, "depth", 0) == 0:
            for t in [tensors] if isinstance(tensors, torch.Tensor) else list(tensors):
                note_backward(t)
        return original_autograd_backward(tensors, *args, **kwargs)

    autograd_backward.__wrapped__ = original_autograd_backward
    torch.autograd.backward = autograd_backward

    original_scale = grad_scaler.GradScaler.scale

    def tag(result, outputs):
        if (
            isinstance(outputs, torch.Tensor)
            and isinstance(result, torch.Tensor)
            and result is not outputs
        ):
            with contextlib.suppress(AttributeError, RuntimeError):  # exotic subclasses
                result._amprewrite_unscaled = outputs.detach()
        elif isinstance(outputs, (list, tuple)) and isinstance(result, (list, tuple)):
            for scaled, output in zip(result, outputs, strict=True):  # `scaler.scale([l1, l2])`
                tag(scaled, output)

    def scale(self, outputs):
        result = original_scale(self, outputs)
        tag(result, outputs)
        return result

    scale.__wrapped__ = original_scale
    grad_scaler.GradScaler.scale = scale

    watched = (nn.Linear, _ConvNd)

    def forward_hook(module, inputs, output):
        if not isinstance(module, watched) or not isinstance(output, torch.Tensor):
            return None
        record["forward_count"] += 1
        devices = record["forward_devices"]
        devices[output.device.type] = devices.get(output.device.type, 0) + 1
        dtype = str(output.dtype)
        grad = torch.is_grad_enabled()
        mode = "train" if grad else "eval"
        try:
            amp = torch.is_autocast_enabled(output.device.type)
        except TypeError:  # pragma: no cover - older torch
            amp = torch.is_autocast_enabled()
        _append(record, "linear_dtypes", dtype)
        _append(record, f"{mode}_dtypes", dtype)
        _append(record, "forwards", [type(module).__name__, dtype, grad, bool(amp)])
        counts = record["dtype_counts"][mode]
        counts[dtype] = counts.get(dtype, 0) + 1
        return None

    nn.modules.module.register_module_forward_hook(forward_hook)


def _install_step_observers(
    record: dict, overflow_at: int | None, skip_at: frozenset[int]
) -> StepObserver:
    from torch.amp import grad_scaler
    from torch.optim import lr_scheduler
    from torch.optim import optimizer as optim_module

    steps = StepObserver(record, overflow_at)
    set_aside: dict[int, list] = {}  # id(optimizer) -> [(param, grad)] during a replayed skip
    scaler_cls = grad_scaler.GradScaler
    original_unscale, original_step = scaler_cls.unscale_, scaler_cls.step
    original_update = scaler_cls.update

    def unscale_(self, optimizer):
        if steps.depth == 0 and self.is_enabled():
            steps.announce(optimizer)
        steps.depth += 1
        try:
            return original_unscale(self, optimizer)
        finally:
            steps.depth -= 1

    def step(self, optimizer, *args, **kwargs):
        if steps.depth == 0:
            steps.announce(optimizer)
        steps.depth += 1
        try:
            return original_step(self, optimizer, *args, **kwargs)
        finally:
            steps.depth -= 1

    def update(self, new_scale=None):
        result = original_update(self, new_scale)
        steps.close_open_attempts()
        if self.is_enabled():
            record["scaler_updates"] += 1
            _append(record, "scales", float(self.get_scale()))
        return result

    for name, wrapper, original in (("unscale_", unscale_, original_unscale),
                                    ("step", step, original_step),
                                    ("update", update, original_update)):
        wrapper.__wrapped__ = original
        setattr(scaler_cls, name, wrapper)

    def before_optimizer_step(optimizer, args, kwargs):
        if steps.depth == 0:  # a direct opt.step(), not one a scaler makes
            steps.announce(optimizer)
            if steps.open.get(id(optimizer)) in skip_at:
                set_aside[id(optimizer)] = _set_grads_aside(optimizer)
        steps.depth += 1

    def after_optimizer_step(optimizer, args, kwargs):
        steps.depth -= 1
        grads = set_aside.pop(id(optimizer), None)
        if grads is None:
            steps.taken(optimizer)
            return
        for param, grad in grads:
            param.grad = grad
        steps.open.pop(id(optimizer), None)  # replayed as skipped

    optim_module.register_optimizer_step_pre_hook(before_optimizer_step)
    optim_module.register_optimizer_step_post_hook(after_optimizer_step)

    base_step = lr_scheduler.LRScheduler.step

    def scheduler_step(self, *args, **kwargs):
        result = base_step(self, *args, **kwargs)
        if getattr(self, "_step_count", 2) > 1:  # 1 after the constructor's initial step
            record["scheduler_steps"] += 1
        return result

    scheduler_step.__wrapped__ = base_step
    lr_scheduler.LRScheduler.step = scheduler_step
    return steps


class StepObserver:
    """Numbers optimizer step attempts, tells taken from skipped, injects the overflow."""

    def __init__(self, record: dict, overflow_at: int | None) -> None:
        self.record = record
        self.overflow_at = overflow_at
        self.depth = 0  # > 0 inside a scaler's unscale_/step or an optimizer's step
        self.open: dict[int, int] = {}  # id(optimizer) -> its attempt not yet taken
        self.taken_attempts: set[int] = set()
        record["overflow_at"] = overflow_at

    def announce(self, optimizer) -> None:
        """A step of `optimizer` is coming: number it (once) and inject when it is due."""
        if id(optimizer) in self.open:
            return  # announced by its unscale_: the gradients were checked there
        self.record["optimizer_steps"] += 1
        attempt = self.open[id(optimizer)] = self.record["optimizer_steps"]
        due = self.overflow_at is not None and self.record["overflow_injected_at"] is None
        if due and attempt >= self.overflow_at and _poison(optimizer):
            self.record["overflow_injected_at"] = attempt

    def taken(self, optimizer) -> None:
        attempt = self.open.pop(id(optimizer), None)
        if attempt is not None:
            self.taken_attempts.add(attempt)
            self.record["optimizer_steps_taken"] += 1

    def close_open_attempts(self) -> None:
        self.open.clear()

    def finish(self) -> None:
        skipped = set(range(1, self.record["optimizer_steps"] + 1)) - self.taken_attempts
        self.record["skipped_at"] = sorted(skipped)[:MAX_ENTRIES]


def _set_grads_aside(optimizer) -> list:
    """Set every gradient of `optimizer` to None (optimizers leave such parameters alone)."""
    grads = []
    for group in optimizer.param_groups:
        for param in group["params"]:
            if param.grad is not None:
                grads.append((param, param.grad))
                param.grad = None
    return grads


def _poison(optimizer) -> bool:
    """Put an inf into the first dense gradient `optimizer` holds; False when it holds none."""
    import torch

    for group in optimizer.param_groups:
        for param in group["params"]:
            grad = getattr(param, "grad", None)
            if isinstance(grad, torch.Tensor) and grad.layout == torch.strided:
                with torch.no_grad():
                    grad[(0,) * grad.dim()] = float("inf")
                return True
    return False


def _install_cuda_defaults() -> None:
    import torch
    from torch.amp import autocast_mode, grad_scaler

    autocast_init = autocast_mode.autocast.__init__

    def autocast(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if device_type == "cpu" and dtype is None:
            dtype = torch.float16
        autocast_init(self, device_type, dtype, enabled, cache_enabled)

    scaler_init = grad_scaler.GradScaler.__init__

    def grad_scaler_(self, device="cuda", *args, enabled=True, **kwargs):
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if device == "cpu" and not caller.startswith(("torch.", "amprewrite_runtime")):
            enabled = True
        scaler_init(self, device, *args, enabled=enabled, **kwargs)

    autocast.__wrapped__ = autocast_init
    grad_scaler_.__wrapped__ = scaler_init
    autocast_mode.autocast.__init__ = autocast
    grad_scaler.GradScaler.__init__ = grad_scaler_
    _refuse_binary_cross_entropy_under_autocast()


def _refuse_binary_cross_entropy_under_autocast() -> None:
    """CUDA autocast raises on binary cross-entropy (nn.BCELoss calls the same function); the
    CPU's does not, so a float16 run on this CPU would hide the crash it has on a GPU."""
    import torch
    import torch.nn.functional as F

    bce = F.binary_cross_entropy

    def binary_cross_entropy(*args, **kwargs):
        if torch.is_autocast_enabled("cpu"):
            raise RuntimeError("torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss "
                               "are unsafe to autocast (as CUDA autocast refuses them)")
        return bce(*args, **kwargs)

    binary_cross_entropy.__wrapped__ = bce
    F.binary_cross_entropy = binary_cross_entropy


def _write(out_path: str, record: dict) -> None:
    tmp = out_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(record, fh)
    os.replace(tmp, out_path)


def install_default_device(name: str) -> None:
    """Create tensors and modules made without a device on `name` from now on (see the module
    docstring): torch.set_default_device, less its clash with CPU generators."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._device import _device_constructors

    device = torch.device(name)
    constructors = _device_constructors()

    class DefaultDevice(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func in constructors and kwargs.get("device") is None:
                generator = kwargs.get("generator")
                if generator is None or generator.device.type == device.type:
                    kwargs["device"] = device
                else:  # drawn from the script's CPU generator, as on the CPU, then moved
                    return func(*args, **kwargs).to(device)
            name = getattr(getattr(func, "__wrapped__", func), "__name__", "")  # observed
            if name == "numpy" and args and args[0].device.type != "cpu":
                return args[0].cpu().numpy(*args[1:], **kwargs)
            gradient = kwargs.get("gradient")
            if (name == "backward" and isinstance(gradient, torch.Tensor) and args
                    and isinstance(args[0], torch.Tensor)
                    and gradient.device != args[0].device):  # a legacy torch.FloatTensor
                kwargs["gradient"] = gradient.to(args[0].device)
            return func(*args, **kwargs)

    DefaultDevice().__enter__()  # for the rest of the process


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python _bootstrap.py OUT.json SCRIPT [ARGS...]", file=sys.stderr)
        return 2
    out_path, script, *args = argv
    script = os.path.abspath(script)
    record = _new_record(script, args)
    started = time.perf_counter()
    exit_code = 0
    overflow_at = os.environ.pop(OVERFLOW_ENV, None)
    skip_at = frozenset(int(v) for v in os.environ.pop(SKIP_ENV, "").split(",") if v)
    steps = None
    try:
        import torch

        torch.set_num_threads(int(os.environ.get("AMPREWRITE_TEST_THREADS", "2")))
        random.seed(0)
        torch.manual_seed(0)
        _install_observers(record)
        if os.environ.pop(CUDA_DEFAULTS_ENV, ""):
            _install_cuda_defaults()
        device = os.environ.pop(DEVICE_ENV, "")
        if device and device != "cpu":
            install_default_device(device)
        steps = _install_step_observers(
            record, int(overflow_at) if overflow_at else None, skip_at)

        sys.argv = [script, *args]
        sys.path[0] = os.path.dirname(script)  # as `python SCRIPT` would have it
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code is None:
            exit_code = 0
        elif isinstance(code, int):
            exit_code = code
        else:  # sys.exit("message") prints the message and exits 1
            print(code, file=sys.stderr)
            exit_code = 1
    except BaseException as exc:  # the script failed: keep the traceback, exit non-zero
        record["error"] = traceback.format_exc()
        record["error_type"] = type(exc).__name__
        traceback.print_exc()
        exit_code = 1
    finally:
        record["duration_s"] = round(time.perf_counter() - started, 4)
        if steps is not None:
            steps.finish()
        record["exit_code"] = exit_code
        sys.stdout.flush()
        _write(out_path, record)
    return exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
