"""Frameworks that own precision: the right rewrite is their own switch, not a scaler.

A framework owns a module's precision when the module builds or subclasses what runs the
training step (an `Accelerator`, a Lightning `Trainer`/`Fabric`/`LightningModule`, a Hugging
Face or TRL `Trainer`, a DeepSpeed engine), or builds a Trainer's arguments
(`TrainingArguments`, TRL's `SFTConfig`, ...) and has no training loop of its own. Its
switch is a constructor's argument (`mixed_precision=`, `precision=`, `bf16=`) or a DeepSpeed
config's section (`"bf16": {"enabled": True}`). Where the setting is made out of sight (a
command line parsed by `HfArgumentParser`, a `**mapping`, a JSON file), the site is reported
with the setting to add.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst

from amprewrite.analysis.facts import Binding, CallSite, ModuleFacts
from amprewrite.analysis.names import dotted

DTYPES = ("bfloat16", "float16")


@dataclass(frozen=True)
class ValueSwitch:
    """One keyword whose value names the precision: `mixed_precision="bf16"`."""

    keyword: str
    values: dict[str, str]  # dtype -> the value's source
    helper: str  # the runtime's function choosing the value at run time
    env: str | None = None  # where the framework's launcher puts its own choice


@dataclass(frozen=True)
class FlagSwitch:
    """One boolean keyword per dtype: `TrainingArguments(bf16=True)`. The Trainer takes
    them on a GPU only, unless told to train on the CPU (`use_cpu=True`): then bf16 only."""

    flags: dict[str, str]  # dtype -> keyword
    cpu_keywords: tuple[str, ...] = ("use_cpu", "no_cuda")

    @property
    def keywords(self) -> tuple[str, ...]:
        return tuple(self.flags.values())


@dataclass(frozen=True)
class SectionSwitch:
    """A DeepSpeed config section per dtype: `"bf16": {"enabled": True}`."""

    sections: dict[str, str]  # dtype -> section key


_LIGHTNING_VALUES = {"float16": '"16-mixed"', "bfloat16": '"bf16-mixed"'}
_LIGHTNING = ValueSwitch("precision", _LIGHTNING_VALUES, "lightning_precision")
_FABRIC = ValueSwitch("precision", _LIGHTNING_VALUES, "lightning_precision", "LT_PRECISION")
_HF_FLAGS = FlagSwitch({"bfloat16": "bf16", "float16": "fp16"})
DEEPSPEED_SECTIONS = SectionSwitch({"bfloat16": "bf16", "float16": "fp16"})
# Sections of a DeepSpeed config that already choose a precision.
_DEEPSPEED_PRECISION_KEYS = frozenset({"bf16", "bfloat16", "fp16", "amp", "torch_autocast"})

# Constructor -> how its precision is switched.
_CONSTRUCTORS: dict[str, ValueSwitch | FlagSwitch] = {
    "accelerate.Accelerator": ValueSwitch("mixed_precision",
                                          {"float16": '"fp16"', "bfloat16": '"bf16"'},
                                          "accelerate_mixed_precision",
                                          "ACCELERATE_MIXED_PRECISION"),
    "lightning.Trainer": _LIGHTNING,
    "lightning.pytorch.Trainer": _LIGHTNING,
    "pytorch_lightning.Trainer": _LIGHTNING,
    "lightning.Fabric": _FABRIC,
    "lightning.fabric.Fabric": _FABRIC,
    "transformers.TrainingArguments": _HF_FLAGS,
    "transformers.Seq2SeqTrainingArguments": _HF_FLAGS,
    "transformers.training_args.TrainingArguments": _HF_FLAGS,
    "transformers.training_args_seq2seq.Seq2SeqTrainingArguments": _HF_FLAGS,
}
# What runs the training step, when a module builds, subclasses or imports it.
_OWNERS = {
    "accelerate.Accelerator": "accelerate",
    "lightning.Trainer": "lightning", "lightning.pytorch.Trainer": "lightning",
    "pytorch_lightning.Trainer": "lightning", "lightning.Fabric": "lightning",
    "lightning.fabric.Fabric": "lightning", "lightning.LightningModule": "lightning",
    "lightning.pytorch.LightningModule": "lightning",
    "pytorch_lightning.LightningModule": "lightning",
    "transformers.Trainer": "transformers", "transformers.Seq2SeqTrainer": "transformers",
    "deepspeed.initialize": "deepspeed",
}


def switch_kinds() -> list[ValueSwitch | FlagSwitch]:
    """Each distinct way a constructor switches precision."""
    return list({id(s): s for s in _CONSTRUCTORS.values()}.values())


_DEEPSPEED_CONFIG_KEYWORDS = ("config", "config_params")
# The packages of everything above: a module importing none of them has no framework switch.
_FRAMEWORK_PACKAGES = frozenset({"accelerate", "lightning", "pytorch_lightning", "transformers",
                                 "trl", "deepspeed"})
_ARGUMENT_PARSERS = frozenset({"transformers.HfArgumentParser", "trl.TrlParser"})
COMMAND_LINE = "comes from the command line"


@dataclass(frozen=True)
class PrecisionSwitch:
    """A framework constructor (or DeepSpeed config) where mixed precision is switched on."""

    node: cst.Call | cst.Dict  # `Accelerator(...)`, `TrainingArguments(...)`, a config dict
    framework: str  # what the user knows it as: "Accelerator", "TrainingArguments", ...
    switch: ValueSwitch | FlagSwitch | SectionSwitch
    current: cst.CSTNode | None  # the argument or section already choosing a precision
    on_cpu: bool = False  # told to train on the CPU (`use_cpu=True`)


@dataclass(frozen=True)
class HiddenSetting:
    """A framework setting amprewrite cannot edit: the site, and what to add there."""

    node: cst.CSTNode
    subject: str  # "`TrainingArguments`", "the DeepSpeed config"
    where: str  # how it is made: "comes from the command line", "is read from `ds.json`"
    switch: FlagSwitch | SectionSwitch


@dataclass(frozen=True)
class FrameworkSettings:
    """The module's framework (None: it owns no precision here) and its switch sites."""

    framework: str | None
    switches: list[PrecisionSwitch]
    hidden: list[HiddenSetting]


def framework_settings(facts: ModuleFacts, trains_a_loop: Callable[[], bool]) -> FrameworkSettings:
    """The framework owning the module's precision, and where to switch it; `trains_a_loop()`:
    whether the module has a training step of its own (its Trainer arguments are then only
    hyperparameters, and the loop gets the regular rewrite)."""
    if not any(name.split(".", 1)[0] in _FRAMEWORK_PACKAGES
               for name in facts.imports.aliases.values()):
        return FrameworkSettings(None, [], [])  # every switch, owner and config is imported
    configs = _config_classes(facts)
    switches, hidden = [], []
    called = [(site, _qualified(site.call.func, facts)) for site in facts.calls]
    for site, name in called:
        switch = _CONSTRUCTORS.get(name) or (_HF_FLAGS if name in configs else None)
        if switch is not None:
            found = _constructor_switch(site.call, name, switch, configs.get(name))
            (hidden if isinstance(found, HiddenSetting) else switches).append(found)
        elif name == "deepspeed.initialize":
            found = _deepspeed_switch(site, facts)
            if found is not None:
                (hidden if isinstance(found, HiddenSetting) else switches).append(found)
        elif name in _ARGUMENT_PARSERS and (
                parsed := _parsed_training_arguments(site.call, facts, configs)):
            hidden.append(HiddenSetting(site.call, f"`{parsed}`", COMMAND_LINE, _HF_FLAGS))
    framework = _owner(facts, [name for _, name in called])
    if framework is None and any(isinstance(s.switch, FlagSwitch) for s in [*switches, *hidden]
                                 ) and not trains_a_loop():
        framework = "transformers"  # arguments for a Trainer built in another module
    if framework is None:
        return FrameworkSettings(None, [], [])
    return FrameworkSettings(framework, switches, hidden)


def _parsed_training_arguments(
    call: cst.Call, facts: ModuleFacts, configs: dict[str, str]
) -> str | None:
    """`HfArgumentParser((ModelArguments, TrainingArguments))`: the name of the dataclass that
    is a Trainer's arguments, if one is."""
    if not call.args:
        return None
    value = call.args[0].value
    classes = [e.value for e in value.elements] if isinstance(value, cst.Tuple | cst.List) else [
        value]
    for node in classes:
        name = _qualified(node, facts)
        if isinstance(_CONSTRUCTORS.get(name), FlagSwitch) or name in configs:
            return name.rsplit(".", 1)[-1]
    return None


def _owner(facts: ModuleFacts, called: list[str]) -> str | None:
    """The framework whose trainer the module imports, builds or subclasses; `called`: the
    qualified names of the module's calls."""
    names = [*facts.imports.aliases.values(),
             *(facts.imports.resolve(base.value) or "" for cls in facts.classes
               for base in cls.bases), *called]
    for name in names:
        if name in _OWNERS:
            return _OWNERS[name]
        if name.startswith("trl.") and name.endswith("Trainer"):
            return "trl"
    return None


def _config_classes(facts: ModuleFacts) -> dict[str, str]:
    """Qualified names of Trainer-argument classes other than transformers' own: TRL's
    configs (`trl.SFTConfig`) and the module's subclasses of any of them, each with the name
    of the framework class it extends."""
    found: dict[str, str] = {}
    for name in facts.imports.aliases.values():
        if name.startswith("trl.") and name.endswith("Config"):
            found[name] = name.rsplit(".", 1)[-1]
    for cls in facts.classes:  # in source order: a subclass of a subclass is seen after it
        for base in cls.bases:
            base_name = _qualified(base.value, facts)
            if isinstance(_CONSTRUCTORS.get(base_name), FlagSwitch) or base_name in found:
                found[cls.name.value] = cls.name.value
    return found


def _constructor_switch(
    call: cst.Call, name: str, switch: ValueSwitch | FlagSwitch, shown: str | None
) -> PrecisionSwitch | HiddenSetting:
    framework = shown or name.rsplit(".", 1)[-1]
    keywords = switch.keywords if isinstance(switch, FlagSwitch) else (switch.keyword,)
    current = next((a for a in call.args
                    if a.keyword is not None and a.keyword.value in keywords), None)
    if current is None and isinstance(switch, FlagSwitch) and any(
            a.star == "**" for a in call.args):
        star = next(a for a in call.args if a.star == "**")
        mapping = cst.Module([]).code_for_node(star.value)
        return HiddenSetting(call, f"`{framework}(...)`", f"is built from `**{mapping}`", switch)
    on_cpu = isinstance(switch, FlagSwitch) and any(
        a.keyword is not None and a.keyword.value in switch.cpu_keywords
        and isinstance(a.value, cst.Name) and a.value.value == "True" for a in call.args)
    return PrecisionSwitch(call, framework, switch, current, on_cpu)


def _deepspeed_switch(
    site: CallSite, facts: ModuleFacts
) -> PrecisionSwitch | HiddenSetting | None:
    """`deepspeed.initialize(..., config=...)`: the config dict written here (literally or
    bound to a name once), else the file or command line it comes from."""
    config = next((a.value for a in site.call.args if a.keyword is not None
                   and a.keyword.value in _DEEPSPEED_CONFIG_KEYWORDS), None)
    if isinstance(config, cst.Name):
        bound = _single_binding(config.value, site.function, facts)
        config = bound.value if bound is not None else config
    if isinstance(config, cst.Call):  # `config=get_ds_config(args)`, built in this module
        config = _returned_dict(config, facts) or config
    if isinstance(config, cst.Dict):
        current = next((e for e in config.elements if isinstance(e, cst.DictElement)
                        and _string(e.key) in _DEEPSPEED_PRECISION_KEYS), None)
        return PrecisionSwitch(config, "DeepSpeed config", DEEPSPEED_SECTIONS, current)
    if config is None:
        where = f"{COMMAND_LINE} (`--deepspeed_config`)"
    elif _string(config) is not None:
        where = f"is read from `{_string(config)}`"
    else:
        where = f"is `{facts.one_line(config)}`"
    return HiddenSetting(config or site.call, "the DeepSpeed config", where, DEEPSPEED_SECTIONS)


def _single_binding(
    name: str, function: cst.FunctionDef | None, facts: ModuleFacts
) -> Binding | None:
    """The one assignment of `name` in `function`, else in the module when the function
    assigns it nowhere."""
    for scope in dict.fromkeys((function, None)):
        bindings = [b for b in facts.bindings if b.keys == (name,) and b.function is scope]
        if bindings:
            return bindings[0] if len(bindings) == 1 else None
    return None


def _returned_dict(call: cst.Call, facts: ModuleFacts) -> cst.Dict | None:
    """The dict literal a module-level function of this module returns, from its only
    `return` (the literal itself, or a name bound to one once in the function)."""
    name = dotted(call.func)
    function = next((f for f in facts.functions if f.name.value == name
                     and f not in facts.function_class), None)
    if function is None:
        return None
    returns = [small.value for statement, info in facts.statements.items()
               if info.function is function and isinstance(statement, cst.SimpleStatementLine)
               for small in statement.body if isinstance(small, cst.Return)]
    if len(returns) != 1:
        return None
    value = returns[0]
    if isinstance(value, cst.Name):
        bound = _single_binding(value.value, function, facts)
        value = bound.value if bound is not None and bound.function is function else None
    return value if isinstance(value, cst.Dict) else None


def _string(node: cst.CSTNode | None) -> str | None:
    """The value of a plain string literal (`"bf16"`), else None."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _qualified(node: cst.BaseExpression, facts: ModuleFacts) -> str:
    """An imported name's qualified name (`transformers.TrainingArguments`), else the
    expression's own dotted name (a class of the module: `MyArguments`), else ""."""
    return facts.imports.resolve(node) or dotted(node) or ""
