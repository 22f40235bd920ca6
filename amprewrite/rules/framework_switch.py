"""Turn on a framework's own mixed precision: `Accelerator(mixed_precision=...)`,
`Trainer(precision=...)`, `Fabric(precision=...)`, `TrainingArguments(bf16=...)` (and TRL's
configs), a DeepSpeed config's `"bf16"`/`"fp16"` section.

With `--dtype`, the value is that dtype's. Without, it is chosen at run time the way the
runtime's policy chooses: bfloat16 where the machine has it (the CPU, CUDA compute capability
8.0 and newer), float16 elsewhere, so that no framework is handed a setting it ignores (fp16
on a CPU) or cannot run (bf16 on a V100).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis.facts import Binding, ModuleFacts, Statement
from amprewrite.analysis.frameworks import (
    COMMAND_LINE,
    DEEPSPEED_SECTIONS,
    FlagSwitch,
    FrameworkSettings,
    HiddenSetting,
    PrecisionSwitch,
    SectionSwitch,
    ValueSwitch,
    switch_kinds,
)
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, NOTE, SKIP, declare
from amprewrite.options import Options
from amprewrite.rules.context import RuleContext
from amprewrite.rules.edits import (
    Builder,
    append_entries,
    append_in_layout,
    keyword,
    one_per_line,
    remove,
    too_long,
    without,
)
from amprewrite.rules.imports import RUNTIME_MODULE, runtime_import, torch_name
from amprewrite.rules.registry import Example, rule
from amprewrite.rules.revert_to_fp32 import MIXED_PRECISION_REMOVED
from amprewrite.rules.shared_examples import MIXED_PRECISION_ALREADY
from amprewrite.transform import Replace

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis

FRAMEWORK_SWITCHED_ON = declare(
    "AMP420", CHANGE, "framework mixed precision switched on",
    "Accelerate (`mixed_precision`), Lightning `Trainer`/`Fabric` (`precision`), Hugging Face "
    "`TrainingArguments` and TRL configs (`bf16`/`fp16`) and DeepSpeed configs (the `bf16`/"
    "`fp16` section) own autocast and scaling: their switch is the whole rewrite. Without "
    "`--dtype`, the value is chosen at run time: bfloat16 where the machine has it (the CPU, "
    "CUDA compute capability 8.0 and newer), else float16.",
    why=(
        "The file builds an `Accelerator`, a Lightning `Trainer`/`Fabric`, Trainer arguments "
        "(`TrainingArguments`, a TRL config) or a DeepSpeed config without a precision setting."
    ),
)

FRAMEWORK_PRECISION_SET = declare(
    "AMP421", SKIP, "framework already sets its precision",
    "The `mixed_precision`/`precision`/`bf16`/`fp16` argument or the config's precision section "
    "is already given: left as is.",
    why="The framework's precision argument or config section is already given.",
    example="accelerator = Accelerator(mixed_precision=\"no\")   # left as is",
)

FRAMEWORK_OWNS_PRECISION = declare(
    "AMP422", NOTE, "framework owns precision elsewhere",
    "This file uses a framework whose trainer is built in another file: set mixed precision "
    "there (amprewrite does when it rewrites that file).",
    why="The file uses a framework whose trainer is built in another file.",
    example="# model.py: a LightningModule; the Trainer is built in train.py",
)

FRAMEWORK_SETTING_OUT_OF_SIGHT = declare(
    "AMP423", SKIP, "framework precision set where amprewrite cannot edit it",
    "The Trainer's arguments come from the command line (`HfArgumentParser`) or a `**mapping`, "
    "or the DeepSpeed config from a JSON file or the command line: the finding says the flag or "
    "section to add there.",
    why=(
        "The Trainer's arguments or the DeepSpeed config are made where amprewrite cannot edit "
        "them: `HfArgumentParser`, a `**mapping`, a JSON file, `--deepspeed_config`."
    ),
    example=(
        "model_args, training_args = parser.parse_args_into_dataclasses()\n"
        "# AMP423 `TrainingArguments` comes from the command line: pass `--bf16`"
    ),
)

FRAMEWORK_BYPASSED = declare(
    "AMP424", NOTE, "a loop of its own beside the framework stays FP32",
    "A plain `loss.backward()` in a file whose framework owns precision (a warm-up loop next "
    "to the Accelerator, a Trainer subclass calling `backward` itself) is outside the "
    "framework's switch: it trains in FP32. Route it through the framework "
    "(`accelerator.backward(loss)`) to train it in mixed precision.",
    why="A plain `loss.backward()` runs in a file whose framework owns precision.",
    example=(
        "warmup(model, loader, optimizer)   # loss.backward() inside: FP32\n"
        "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)"
    ),
)

_PREFERS_BFLOAT16 = "prefers_bfloat16"  # the runtime's run-time choice
_PLAIN_CHOICE = ("use_bf16", "amp_use_bf16")  # the plain style's module-level choice


def switch_on_mixed_precision(ctx: RuleContext, settings: FrameworkSettings) -> None:
    dtype = ctx.options.dtype
    prefers = None
    for switch in settings.switches:
        if switch.current is not None:
            current = ctx.facts.one_line(switch.current).rstrip(", ")
            who = (f"the {switch.framework}" if isinstance(switch.node, cst.Dict)
                   else f"`{switch.framework}`")
            ctx.notes.append(Note(FRAMEWORK_PRECISION_SET, switch.node,
                                  f"{who} already sets `{current}`; left unchanged"))
            continue
        if not dtype and prefers is None:
            prefers = _run_time_choice(ctx)
        items = _new_items(ctx, switch, dtype, prefers)
        _append(ctx, switch.node, items)
        added = ", ".join(ctx.facts.module.code_for_node(i) for i in items)
        what = (f"the {switch.framework}" if isinstance(switch.node, cst.Dict)
                else f"`{switch.framework}(...)`")
        ctx.notes.append(Note(FRAMEWORK_SWITCHED_ON, switch.node,
                              f"{what} owns precision: `{added}` added (no hand-made scaler)"))
    for hidden in settings.hidden:
        ctx.notes.append(Note(FRAMEWORK_SETTING_OUT_OF_SIGHT, hidden.node,
                              _hidden_message(hidden, dtype)))


def switch_off_mixed_precision(ctx: RuleContext, settings: FrameworkSettings) -> None:
    """O0: take out a mixed-precision switch amprewrite would have added, and the import or
    definition its run-time choice used."""
    ours = {_normal(code) for code in _forms_written(ctx.facts)}
    for switch in settings.switches:
        container = switch.node
        items = container.elements if isinstance(container, cst.Dict) else container.args
        removed = [i for i in items if _normal(_item_code(ctx.facts, i)) in ours]
        if not removed:
            continue
        if len(removed) == len(items):  # `Accelerator(\n    mixed_precision=...,\n)`
            build: Builder = _emptied
        else:
            build = functools.reduce(_then, [without(container, item) for item in removed])
        ctx.plan.replaces.append(Replace(container, build))
        names = ", ".join(f"`{_item_code(ctx.facts, i).split('=')[0].split(':')[0]}`"
                          for i in removed)
        ctx.notes.append(Note(MIXED_PRECISION_REMOVED, container,
                              f"{names} removed: the framework trains in FP32 again (O0)"))
    for statement in _run_time_choice_statements(ctx.facts):
        ctx.plan.replaces.append(Replace(statement, remove))


def _run_time_choice(ctx: RuleContext) -> str:
    """The expression telling bfloat16 from float16 at run time; its import or definition
    goes to the style's header."""
    assert ctx.style is not None
    if not ctx.options.plain:
        code, local = runtime_import(ctx.facts, [_PREFERS_BFLOAT16], ctx.names)
        ctx.style.imports.append(code)
        return f"{local[_PREFERS_BFLOAT16]}()"
    name = ctx.names.fresh(_PLAIN_CHOICE)
    ctx.style.definitions.append(f"{name} = {_plain_choice(ctx.torch())}")
    return name


def _plain_choice(torch: str) -> str:
    """bfloat16 on the CPU and on CUDA devices with bfloat16 tensor cores."""
    return f"not {torch}.cuda.is_available() or {torch}.cuda.get_device_capability() >= (8, 0)"


def _new_items(
    ctx: RuleContext, switch: PrecisionSwitch, dtype: str | None, prefers: str | None
) -> list[cst.Arg | cst.DictElement]:
    gpu = None
    if isinstance(switch.switch, FlagSwitch) and not switch.on_cpu:
        gpu = f"{ctx.torch()}.cuda.is_available()"
    return [_parse_item(ctx, code)
            for code in _item_codes(switch.switch, dtype, prefers, gpu, switch.on_cpu)]


def _item_codes(
    switch: ValueSwitch | FlagSwitch | SectionSwitch, dtype: str | None, prefers: str | None,
    gpu: str | None = None, on_cpu: bool = False,
) -> list[str]:
    """The arguments or entries switching mixed precision on: for `dtype`, or (None) chosen
    by the expression `prefers` (true for bfloat16). Flags hold only where `gpu` (the
    expression telling a GPU is there) does; `on_cpu`: bfloat16, the Trainer's CPU dtype."""
    if isinstance(switch, ValueSwitch):
        value = switch.values[dtype] if dtype else (
            f"{switch.values['bfloat16']} if {prefers} else {switch.values['float16']}")
        return [f"{switch.keyword}={value}"]
    if isinstance(switch, FlagSwitch):
        bf16, fp16 = switch.flags["bfloat16"], switch.flags["float16"]
        if on_cpu:
            return [f"{bf16}=True"]
        if dtype:
            return [f"{switch.flags[dtype]}={gpu or True}"]
        if gpu is None:
            return [f"{bf16}={prefers}", f"{fp16}=not {prefers}"]
        return [f"{bf16}={gpu} and {prefers}", f"{fp16}={gpu} and not {prefers}"]
    if dtype:
        return [f'"{switch.sections[dtype]}": {{"enabled": True}}']
    return [f'"{switch.sections["bfloat16"]}": {{"enabled": {prefers}}}',
            f'"{switch.sections["float16"]}": {{"enabled": not {prefers}}}']


def _parse_item(ctx: RuleContext, code: str) -> cst.Arg | cst.DictElement:
    if ":" in code.split("=", 1)[0]:  # a dict entry
        parsed = ctx.parse_expression(f"{{{code}}}")
        assert isinstance(parsed, cst.Dict)
        element = parsed.elements[0]
        assert isinstance(element, cst.DictElement)
        return element.with_changes(comma=cst.MaybeSentinel.DEFAULT)
    name, value = code.split("=", 1)
    return keyword(name, ctx.parse_expression(value))


def _append(ctx: RuleContext, container: cst.Call | cst.Dict,
            items: Sequence[cst.Arg | cst.DictElement]) -> None:
    if isinstance(container, cst.Call):
        build = append_in_layout(container, [i for i in items if isinstance(i, cst.Arg)],
                                 ctx.facts, ctx.line_limit)
    else:
        build = append_entries([i for i in items if isinstance(i, cst.DictElement)])
        if too_long(ctx.facts, container, items, ctx.line_limit):
            build = one_per_line(build, ctx.facts.module.default_indent)
    ctx.plan.replaces.append(Replace(container, build))


def _hidden_message(hidden: HiddenSetting, dtype: str | None) -> str:
    switch = hidden.switch
    if isinstance(switch, FlagSwitch):
        values = {d: f"`{flag}=True`" for d, flag in switch.flags.items()}
        if hidden.where == COMMAND_LINE:
            values = {d: f"`--{flag}`" for d, flag in switch.flags.items()}
            action = "pass"
        else:
            action = "set"
    else:
        values = {d: f'`"{section}": {{"enabled": true}}`'
                  for d, section in switch.sections.items()}
        action = "add"
    setting = values[dtype] if dtype else (
        f"{values['bfloat16']} ({values['float16']} on GPUs older than compute capability 8.0)")
    there = "" if action == "pass" else " there"
    return f"{hidden.subject} {hidden.where}: {action} {setting}{there}; left unchanged"


def _forms_written(facts: ModuleFacts) -> Iterator[str]:
    """Every argument or entry the switch writes, for each way it may have chosen."""
    choices = [*(f"{alias}()" for alias, target in facts.imports.aliases.items()
                 if target == f"{RUNTIME_MODULE}.{_PREFERS_BFLOAT16}"),
               *(b.keys[0] for b in _plain_choice_bindings(facts))]
    gpu = f"{torch_name(facts) or 'torch'}.cuda.is_available()"
    for switch in [*switch_kinds(), DEEPSPEED_SECTIONS]:
        for dtype in ("bfloat16", "float16"):
            yield from _item_codes(switch, dtype, None)
            yield from _item_codes(switch, dtype, None, gpu)
        for prefers in choices:
            yield from _item_codes(switch, None, prefers)
            yield from _item_codes(switch, None, prefers, gpu)


def _plain_choice_bindings(facts: ModuleFacts) -> list[Binding]:
    torch = torch_name(facts) or "torch"
    return [b for b in facts.bindings if b.function is None and len(b.keys) == 1
            and b.keys[0].startswith(_PLAIN_CHOICE)
            and _normal(facts.one_line(b.value)) == _normal(_plain_choice(torch))]


def _run_time_choice_statements(facts: ModuleFacts) -> list[Statement]:
    """The runtime import of `prefers_bfloat16` alone, and the plain style's definition."""
    found: list[Statement] = [b.statement for b in _plain_choice_bindings(facts)]
    for statement in facts.module.body:
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
            small = statement.body[0]
            if (isinstance(small, cst.ImportFrom) and isinstance(small.module, cst.Name)
                    and small.module.value == RUNTIME_MODULE
                    and isinstance(small.names, Sequence) and len(small.names) == 1
                    and small.names[0].evaluated_name == _PREFERS_BFLOAT16):
                found.append(statement)
    return found


def _item_code(facts: ModuleFacts, item: cst.CSTNode) -> str:
    return facts.one_line(item.with_changes(comma=cst.MaybeSentinel.DEFAULT))


def _normal(code: str) -> str:
    """Code compared without its spacing or quote style."""
    return "".join(code.split()).replace("'", '"')


def _then(first: Builder, second: Builder) -> Builder:
    return lambda node: second(first(node))


def _emptied(node: cst.CSTNode) -> cst.CSTNode:
    """The call or dict with no arguments or entries left: `Accelerator()`, `{}`."""
    if isinstance(node, cst.Call):
        return node.with_changes(args=[], whitespace_before_args=cst.SimpleWhitespace(""))
    assert isinstance(node, cst.Dict)
    return node.with_changes(elements=[], lbrace=cst.LeftCurlyBrace(),
                             rbrace=cst.RightCurlyBrace())


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    """A framework owns precision: switch it (add no autocast or scaler of our own)."""
    settings = analysis.frameworks
    if ctx.options.opt_level == "O0":
        switch_off_mixed_precision(ctx, settings)
        return
    switch_on_mixed_precision(ctx, settings)
    for site in analysis.training.backwards:
        ctx.notes.append(Note(FRAMEWORK_BYPASSED, site.call,
                              f"`{ctx.facts.one_line(site.call)}` is not {settings.framework}'s: "
                              "its loop trains in FP32; left unchanged"))
    if not settings.switches and not settings.hidden:
        where = ("where the Trainer's arguments are built" if settings.framework in (
            "transformers", "trl") else "where the trainer is built")
        ctx.notes.append(Note(FRAMEWORK_OWNS_PRECISION, ctx.facts.module.body[0],
                              f"{settings.framework} owns the training step's precision; set "
                              f"it {where}"))


_FRAMEWORK_SWITCH_EXAMPLES = (
    Example(
        before="""\
from accelerate import Accelerator

accelerator = Accelerator()
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
""",
        after="""\
from accelerate import Accelerator

accelerator = Accelerator(mixed_precision="fp16")
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
""",
        codes=(FRAMEWORK_SWITCHED_ON,), options=Options(dtype="float16"),
    ),
    Example(
        before=MIXED_PRECISION_ALREADY,
        after=None,
        codes=(),
    ),
)


RULE = rule("framework-switch", (FRAMEWORK_SWITCHED_ON, FRAMEWORK_PRECISION_SET,
                                 FRAMEWORK_OWNS_PRECISION, FRAMEWORK_SETTING_OUT_OF_SIGHT,
                                 FRAMEWORK_BYPASSED), _plan,
            examples=_FRAMEWORK_SWITCH_EXAMPLES, reports=(MIXED_PRECISION_REMOVED,))
