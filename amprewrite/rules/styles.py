"""The two output styles: amprewrite's runtime (default) or plain `torch.amp` (`--plain`)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.names import FreshNames
from amprewrite.analysis.scaler_home import keyword_argument
from amprewrite.options import Options
from amprewrite.rules.custom_functions import Decorators
from amprewrite.rules.imports import runtime_import, torch_name


@dataclass(frozen=True)
class Needs:
    """What the rewritten module uses."""

    scaler: bool
    autocast: bool
    custom_functions: bool
    sharded: bool  # FSDP
    reproducible: bool = False
    integer_safe_casts: bool = False  # a value that may be an integer tensor is cast
    fsdp_policy: bool = False  # FSDP wraps get a mixed-precision policy
    float8: bool = False  # a model is converted to float8 training (`--dtype float8`)
    float32_sigmoid: bool = False  # a final `nn.Sigmoid()` layer feeding BCE runs in float32


@dataclass
class Style:
    """How the rewrite spells AMP: the runtime's API or plain torch.amp."""

    imports: list[str] = field(default_factory=list)  # added after the module's imports
    definitions: list[str] = field(default_factory=list)  # module-level names, after imports
    autocast: str = ""  # the context manager expression
    scaler: str = ""  # the scaler constructor expression
    decorators: Decorators | None = None
    seeding: str = ""  # the local name of `enable_reproducibility`
    # casts floating tensors only (`to_float32(x)`); empty: `x.float() if
    # x.is_floating_point() else x`
    float32_cast: str = ""
    # the low-precision dtype FSDP policies are given (`low_precision_dtype()`); empty: none
    param_dtype: str = ""
    float8_training: str = ""  # the local name of `float8_training`; empty: not imported
    float32_sigmoid: str = ""  # the local name of `float32_sigmoid`; empty: not imported


def runtime_style(
    facts: ModuleFacts, options: Options, needs: Needs, carried: tuple[str, ...] | None,
    names: FreshNames,
) -> Style:
    """The runtime's API; `carried`: scaler arguments a migration kept from the script."""
    symbols = [name for name, used in (
        ("GradScaler", needs.scaler), ("autocast", needs.autocast),
        ("custom_bwd", needs.custom_functions), ("custom_fwd", needs.custom_functions),
        ("enable_reproducibility", needs.reproducible), ("float8_training", needs.float8),
        ("to_float32", needs.integer_safe_casts), ("float32_sigmoid", needs.float32_sigmoid),
        ("low_precision_dtype", needs.fsdp_policy and not options.autocast_dtype),
    ) if used]
    import_code, local = runtime_import(facts, symbols, names)
    style = Style(imports=[import_code], seeding=local.get("enable_reproducibility", ""),
                  float32_cast=local.get("to_float32", ""),
                  float8_training=local.get("float8_training", ""),
                  float32_sigmoid=local.get("float32_sigmoid", ""))
    chosen = options.autocast_dtype
    dtype = f'dtype="{chosen}"' if chosen else ""
    if needs.fsdp_policy:
        style.param_dtype = (f"{torch_name(facts) or 'torch'}.{chosen}" if chosen
                             else f"{local['low_precision_dtype']}()")
    if needs.autocast:
        style.autocast = f"{local['autocast']}({dtype})"
    if needs.scaler:
        arguments = _scaler_arguments(options, needs, carried)
        style.scaler = f"{local['GradScaler']}({', '.join(arguments)})"
    if needs.custom_functions:
        style.decorators = Decorators(
            forward=local["custom_fwd"],
            forward_float32=f'{local["custom_fwd"]}(cast_inputs="float32")',
            backward=local["custom_bwd"],
        )
    return style


def _scaler_arguments(
    options: Options, needs: Needs, carried: tuple[str, ...] | None
) -> list[str]:
    if carried is not None:
        return [*carried, *(["sharded=True"] if needs.sharded else [])]
    arguments = [] if options.opt_level == "O1" else [f'"{options.opt_level}"']
    if options.autocast_dtype:
        arguments.append(f'dtype="{options.autocast_dtype}"')
    for name in ("keep_batchnorm_fp32", "master_weights"):
        value = getattr(options, name)
        if value is not None:
            arguments.append(f"{name}={value}")
    if options.loss_scale == "dynamic":
        arguments.append('loss_scale="dynamic"')
    elif options.loss_scale is not None:
        arguments.append(f"loss_scale={float(options.loss_scale)!r}")
    if needs.sharded:
        arguments.append("sharded=True")
    return arguments


def off_when(test: str, options: Options, needs: Needs) -> tuple[str, ...]:
    """The scaler's arguments with its opt level O0 where `test` holds (`"O0" if args.fp16
    else "O1"`): the script's own apex path runs there, as it was."""
    arguments = _scaler_arguments(options, replace(needs, sharded=False), None)
    level = arguments.pop(0) if arguments and arguments[0].startswith('"O') else '"O1"'
    return (f'"O0" if {test} else {level}', *arguments)


def defer_to_initialize(scaler: str, carried: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """A migration's scaler arguments that name what only a function binds (`args`), for a
    scaler created at module level: `GradScaler(args.opt_level, keep_batchnorm_fp32=k)`
    becomes `GradScaler()`, and `initialize(model, optimizer, ...)` where the optimizer is
    built passes `opt_level=args.opt_level, keep_batchnorm_fp32=k`."""
    constructor = scaler.split("(", 1)[0]
    kept = "sharded=True" if scaler.endswith("sharded=True)") else ""
    moved = tuple(argument if keyword_argument(argument) else f"opt_level={argument}"
                  for argument in carried)
    return f"{constructor}({kept})", moved


def plain_style(
    facts: ModuleFacts, options: Options, needs: Needs, carried: tuple[str, ...] | None,
    names: FreshNames,
) -> Style:
    """Plain torch.amp (`--plain`, which a migration's carried arguments never reach)."""
    torch = torch_name(facts)
    style = Style(imports=[] if torch else ["import torch"])
    torch = torch or "torch"
    device = names.fresh(("amp_device", "autocast_device"))
    style.definitions.append(f'{device} = "cuda" if {torch}.cuda.is_available() else "cpu"')
    dtype = f", dtype={torch}.{options.dtype}" if options.dtype else ""
    style.autocast = f"{torch}.autocast({device}{dtype})"
    if needs.fsdp_policy:  # the dtype that autocast uses by default on the device
        style.param_dtype = (f"{torch}.{options.dtype}" if options.dtype
                             else f"{torch}.get_autocast_dtype({device})")
    scaler_class = f"{torch}.amp.GradScaler"
    if needs.sharded and needs.scaler:
        style.imports.append(
            "from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler")
        scaler_class = "ShardedGradScaler"
    if options.dtype == "float16":
        style.scaler = f"{scaler_class}({device})"
    else:
        style.scaler = f'{scaler_class}({device}, enabled={device} == "cuda")'
    forward = f"{torch}.amp.custom_fwd(device_type={device})"
    style.decorators = Decorators(
        forward=forward,
        forward_float32=f"{forward[:-1]}, cast_inputs={torch}.float32)",
        backward=f"{torch}.amp.custom_bwd(device_type={device})",
    )
    return style
