"""What the user asked for: opt level with apex's property overrides, dtype, output style."""

from __future__ import annotations

from dataclasses import dataclass

OPT_LEVELS = ("O0", "O1", "O2", "O3")
DTYPES = ("float16", "bfloat16", "float8")


@dataclass(frozen=True)
class Options:
    """How to rewrite: opt level, dtype, style and apex-style property overrides."""

    opt_level: str = "O1"
    # None: chosen at run time (bfloat16 where the machine has it); float8: bfloat16 autocast
    # over float8 linear layers, where the GPU has them (`float8_training(model)`)
    dtype: str | None = None
    plain: bool = False  # emit torch.amp only, no runtime import
    keep_batchnorm_fp32: bool | None = None  # None: the opt level's default
    master_weights: bool | None = None
    loss_scale: str | None = None  # "dynamic" or a number, as typed
    reproducible: bool = False  # seed everything at the entry point, seed training loaders
    seed: int = 0
    line_length: int | None = None  # the project's (ruff, black, flake8); None: each file's
    # a file of this one's project that trains with its own mixed precision (as shown): no
    # autocast is added to this file's evaluation code (`project.own_amp`)
    project_amp: str | None = None
    # lint fixes the protocol check cannot confirm are applied too (ruff's --unsafe-fixes)
    unsafe_fixes: bool = False
    # the codes whose findings are reported and whose edits are made (`--select`/`--ignore`,
    # code prefixes), and `per-file-ignores` (`suppressions.PerFileIgnores`), which
    # `suppressions.options_for` folds into `ignore` for each file
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def casts_model(self) -> bool:
        return self.opt_level in ("O2", "O3")

    @property
    def autocast_dtype(self) -> str | None:
        """The dtype autocast computes in: float8 training's is bfloat16."""
        return "bfloat16" if self.dtype == "float8" else self.dtype

    @property
    def uses_master_weights(self) -> bool:
        default = self.opt_level == "O2"
        return self.master_weights if self.master_weights is not None else default


def validate(options: Options) -> str | None:
    """Why `options` make no sense (an explanation in apex's spirit), or None."""
    level = options.opt_level
    if level not in OPT_LEVELS:
        return f"unknown opt level {level!r}; choose one of {', '.join(OPT_LEVELS)}"
    if options.dtype is not None and options.dtype not in DTYPES:
        return f"unknown dtype {options.dtype!r}; choose one of {', '.join(DTYPES)}"
    if options.loss_scale is not None and options.loss_scale != "dynamic":
        try:
            scale = float(options.loss_scale)
        except ValueError:
            return f"--loss-scale takes 'dynamic' or a positive number, not {options.loss_scale!r}"
        if not scale > 0:
            return f"--loss-scale must be positive, not {options.loss_scale}"
    if level == "O0":
        return _o0_problem(options)
    if options.dtype == "float8" and (level != "O1" or options.plain):
        return ("float8 training is O1 with the runtime: bfloat16 autocast over float8 linear "
                "layers that `float8_training(model)` converts where the GPU has them "
                "(--opt-level O2/O3 and --plain cannot apply)")
    if level == "O1":
        if options.master_weights:
            return ("O1 inserts casts around torch functions rather than casting model weights: "
                    "the weights stay FP32, so FP32 master weights make no sense "
                    "(use --opt-level O2 for master weights)")
        if options.keep_batchnorm_fp32 is not None:
            return ("O1 keeps every model weight in FP32, batchnorm included: "
                    "--keep-batchnorm-fp32 does not apply (it is an O2/O3 property)")
    if options.plain and options.casts_model:
        return ("--plain emits torch.amp only, which has no O2/O3 "
                "(model casting and master weights need the runtime)")
    if options.plain and options.reproducible:
        return "--reproducible uses the runtime's helpers, which --plain leaves out"
    if options.plain and options.loss_scale not in (None, "dynamic"):
        return "--plain supports dynamic loss scaling only (a static scale needs the runtime)"
    return None


def _o0_problem(options: Options) -> str | None:
    given = [flag for flag, value in (
        ("--dtype", options.dtype),
        ("--master-weights", options.master_weights),
        ("--keep-batchnorm-fp32", options.keep_batchnorm_fp32),
    ) if value]
    scale = options.loss_scale
    if scale is not None and (scale == "dynamic" or float(scale) != 1.0):
        given.append("--loss-scale")
    if given:
        return (f"O0 is pure FP32 training: {', '.join(given)} cannot apply "
                "(there is no low-precision dtype, no cast model and no loss scaling)")
    return None
