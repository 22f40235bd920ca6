"""The names of torch's API that the protocol checker knows (the one thing it shares with the
planner, besides Python's grammar)."""

from __future__ import annotations

import re

__all__ = ["AUTOCASTS", "CLIPPING", "FRAMEWORK_RECEIVERS", "NOT_OPTIMIZERS",
           "OPTIMIZER_CLASSES", "SCALER_CLASSES", "SCALER_METHODS", "optimizer_named"]

# torch's autocast context managers (and the runtime's), by qualified name.
AUTOCASTS = frozenset({"torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast",
                       "torch.cpu.amp.autocast", "torch.amp.autocast_mode.autocast",
                       "amprewrite_runtime.autocast"})

# Classes whose instances follow GradScaler's protocol (the last part of the qualified name:
# torch.amp.GradScaler, torch.cuda.amp.GradScaler, amprewrite_runtime.GradScaler,
# torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler).
SCALER_CLASSES = frozenset({"GradScaler", "ShardedGradScaler"})
SCALER_METHODS = frozenset({"scale", "step", "update", "unscale_", "state_dict",
                            "load_state_dict", "get_scale", "is_enabled", "initialize",
                            "master_params", "set_growth_factor", "get_growth_factor",
                            "get_backoff_factor", "set_backoff_factor", "get_growth_interval",
                            "set_growth_interval", "last_step_skipped", "skipped_steps"})

# Gradient clipping and other calls that read or change every gradient they are given.
CLIPPING = frozenset({"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm",
                      "clip_grads_with_norm_", "get_total_norm", "clip_gradient",
                      "clip_gradients", "clip_grad"})

# torch.optim's optimizers and the common third-party ones, by class name.
OPTIMIZER_CLASSES = frozenset({
    "Adam", "AdamW", "SGD", "RMSprop", "Adagrad", "Adadelta", "Adamax", "LBFGS", "NAdam",
    "RAdam", "SparseAdam", "ASGD", "Rprop", "Adafactor", "Lamb", "LAMB", "Lion", "FusedAdam",
    "FusedLAMB", "FusedSGD", "AdamP", "SGDP", "Ranger", "Lookahead", "Muon",
    "ZeroRedundancyOptimizer",
})
_OPTIMIZER_NAME = re.compile(r"optim|(^|_)opts?($|_)", re.IGNORECASE)
_NOT_OPTIMIZER_NAME = re.compile(r"sched|lr_|warmup|step_size", re.IGNORECASE)
NOT_OPTIMIZERS = re.compile(r"^torch\.optim\.(lr_scheduler|swa_utils)\.")

# `.backward(loss)` on these runs a framework's own backward (its scaling is its own).
FRAMEWORK_RECEIVERS = re.compile(
    r"accelerat|fabric|engine|deepspeed|trainer|learner|strategy|booster|manual", re.IGNORECASE)


def optimizer_named(key: str) -> bool:
    """Whether a key's name says optimizer (`optimizer`, `self.opt_d`, `g_optim`,
    `self.optims[name]`, `optims.generator`), and not a scheduler's."""
    parts = re.split(r"[.\[\]]", key)
    return (any(_OPTIMIZER_NAME.search(part) for part in parts)
            and not any(_NOT_OPTIMIZER_NAME.search(part) for part in parts))
