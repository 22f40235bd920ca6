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
from dataclasses import dataclass
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
from amprewrite.analysis.names import dotted
from amprewrite.analysis.training_step import Note
from amprewrite.analysis.tree import descendants
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
    "is already given, or the `Accelerator` gets a float8 recipe of the script's own "
    "(`AORecipeKwargs`, `TERecipeKwargs`, `MSAMPRecipeKwargs`, `FP8RecipeKwargs` in "
    "`kwargs_handlers`: float8 where `accelerate launch --mixed_precision fp8` runs it): left "
    "as is.",
    why=("The framework's precision argument or config section is already given, or an "
         "`Accelerator` gets the script's own float8 recipe."),
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

AUTHORS_SWITCH_KEPT = declare(
    "AMP429", SKIP, "the script's own framework precision kept at O0",
    "O0 takes out the precision setting amprewrite writes (a call of its runtime's "
    "`accelerate_mixed_precision()`, `lightning_precision()`, `mixed_precision_flag(...)`, or "
    "the plain style's `use_bf16` choice and `os.environ.get(...)` of the launcher's variable). "
    "A plain value (`precision=\"16-mixed\"`, `bf16=True`) is the author's, or cannot be told "
    "from it (`--plain --dtype` writes one): it stays. Set it to FP32 by hand "
    "(`precision=\"32-true\"`, `mixed_precision=\"no\"`, `bf16=False`) if that is what you want.",
    why="`--opt-level O0` on a framework setting that amprewrite did not write.",
    example="trainer = L.Trainer(max_epochs=3, precision=\"16-mixed\")   # kept at O0",
)

FRAMEWORK_FLOAT8 = declare(
    "AMP431", NOTE, "float8 is the framework's to switch on",
    "With `--dtype float8` an `Accelerator` gets Accelerate's torchao float8 recipe "
    "(`mixed_precision=accelerate_mixed_precision(\"float8\"), kwargs_handlers="
    "accelerate_float8_handlers()`: fp8 where float8 is chosen at run time, else bf16). Other "
    "frameworks' switches, and an `Accelerator` given `kwargs_handlers` of its own, get "
    "bfloat16; float8 is then their own setting, for a GPU with float8 tensor cores (compute "
    "capability 8.9 or newer): `AORecipeKwargs()` among the Accelerator's `kwargs_handlers` "
    "with `mixed_precision=\"fp8\"`, the Hugging Face Trainer's `accelerate launch "
    "--mixed_precision fp8` with `ACCELERATE_FP8_BACKEND=AO`, Lightning's "
    "`precision=\"transformer-engine\"` (TransformerEngine; or `model = float8_training(model)` "
    "where the LightningModule is built). DeepSpeed configs have no float8 section.",
    why="`--dtype float8` on a file whose framework owns precision, where no float8 recipe is "
        "written.",
    example=(
        "trainer = L.Trainer(precision=lightning_precision(\"bfloat16\"))\n"
        "# AMP431 for float8: precision=\"transformer-engine\""
    ),
)

_FLOAT8_SETTINGS = {  # the framework's own float8 setting, by its runtime helper or name
    "accelerate_mixed_precision": (  # an Accelerator with kwargs_handlers of its own
        '`AORecipeKwargs()` (`accelerate.utils`, torchao\'s float8) among its `kwargs_handlers`, '
        'with `mixed_precision="fp8"`'),
    "lightning_precision": (
        '`precision="transformer-engine"` (TransformerEngine installed), or '
        "`model = float8_training(model)` where the LightningModule is built"),
    "DeepSpeed config": "none: DeepSpeed configs have no float8 section",
}
_FLOAT8_THROUGH_ACCELERATE = ("`accelerate launch --mixed_precision fp8` with "
                              "`ACCELERATE_FP8_BACKEND=AO` (torchao's float8)")

_PREFERS_BFLOAT16 = "prefers_bfloat16"  # the runtime's run-time choice (earlier rewrites)
_FLAG_HELPER = "mixed_precision_flag"  # the runtime's choice of a flag or a config section
_FLOAT8_HANDLERS = "accelerate_float8_handlers"  # Accelerate's torchao recipe, for float8
_HELPERS = ("accelerate_mixed_precision", "lightning_precision", _FLAG_HELPER, _FLOAT8_HANDLERS)
_PLAIN_CHOICE = ("use_bf16", "amp_use_bf16")  # the plain style's module-level choice


@dataclass(frozen=True)
class _Spelling:
    """How a switch's value is written. The runtime style calls the runtime's helpers
    (`helpers`: their local names), which leave the choice to the framework's launcher or
    config when it made one and turn mixed precision off at `AMPREWRITE_OPT_LEVEL=O0`. The
    plain style writes the value (`choice`: the variable telling bfloat16 at run time, None
    with `--dtype`), behind `os.environ.get(...)` of the launcher's variable where the
    framework has one (`os`: the module's name for it)."""

    helpers: dict[str, str] | None = None
    choice: str | None = None
    os: str = "os"


def switch_on_mixed_precision(ctx: RuleContext, settings: FrameworkSettings) -> None:
    dtype = ctx.options.autocast_dtype
    spelling: _Spelling | None = None
    # where the script sets one of a framework's switches itself, the others it leaves unset
    # are its choice too (a benchmark's FP32 baseline beside `Accelerator(mixed_precision=
    # "fp8")`): left as written
    authors = {switch.framework: ctx.facts.one_line(switch.current).rstrip(", ")
               for switch in settings.switches if switch.current is not None}
    for switch in settings.switches:
        if switch.current is None and switch.framework in authors:
            ctx.notes.append(Note(FRAMEWORK_PRECISION_SET, switch.node, (
                f"the script sets `{switch.framework}`'s precision itself elsewhere "
                f"(`{authors[switch.framework]}`): this one's default is its choice too; "
                "left unchanged")))
            continue
        recipe = _authors_float8_recipe(ctx, switch)
        if recipe is not None:
            ctx.notes.append(Note(FRAMEWORK_PRECISION_SET, switch.node, (
                f"`{switch.framework}` gets the script's own float8 recipe (`{recipe}` in "
                "`kwargs_handlers`): its precision is the launcher's (`--mixed_precision fp8`); "
                "left unchanged")))
            continue
        if switch.current is not None:
            current = ctx.facts.one_line(switch.current).rstrip(", ")
            who = (f"the {switch.framework}" if isinstance(switch.node, cst.Dict)
                   else f"`{switch.framework}`")
            ctx.notes.append(Note(FRAMEWORK_PRECISION_SET, switch.node,
                                  f"{who} already sets `{current}`; left unchanged"))
            continue
        if spelling is None:
            spelling = _spelling(ctx, settings)
        float8 = _float8_recipe(ctx, switch)
        items = _new_items(ctx, switch, "float8" if float8 else dtype, spelling)
        _append(ctx, switch.node, items)
        added = ", ".join(ctx.facts.module.code_for_node(i) for i in items)
        what = (f"the {switch.framework}" if isinstance(switch.node, cst.Dict)
                else f"`{switch.framework}(...)`")
        ctx.notes.append(Note(FRAMEWORK_SWITCHED_ON, switch.node,
                              f"{what} owns precision: `{added}` added (no hand-made scaler)"))
        if ctx.options.dtype == "float8" and not float8:
            ctx.notes.append(Note(FRAMEWORK_FLOAT8, switch.node, _float8_message(switch)))
    for hidden in settings.hidden:
        ctx.notes.append(Note(FRAMEWORK_SETTING_OUT_OF_SIGHT, hidden.node,
                              _hidden_message(hidden, dtype)))


# Accelerate's float8 recipes: a script handing one to its `Accelerator` trains in float8
# where it is launched with `--mixed_precision fp8`, and a switch of ours would override that
_FLOAT8_RECIPES = ("AORecipeKwargs", "TERecipeKwargs", "MSAMPRecipeKwargs", "FP8RecipeKwargs")


def _authors_float8_recipe(ctx: RuleContext, switch: PrecisionSwitch) -> str | None:
    """The float8 recipe an `Accelerator` with `kwargs_handlers` of its own may get: the
    name the script imports one of Accelerate's under, else None."""
    if not isinstance(switch.node, cst.Call) or switch.current is not None or not any(
            a.keyword is not None and a.keyword.value == "kwargs_handlers"
            for a in switch.node.args):
        return None
    return next((alias for alias, target in ctx.facts.imports.aliases.items()
                 if target.startswith("accelerate.")
                 and target.rsplit(".", 1)[-1] in _FLOAT8_RECIPES), None)


def _float8_recipe(ctx: RuleContext, switch: PrecisionSwitch) -> bool:
    """Whether `switch` gets Accelerate's float8 recipe (`--dtype float8` on an `Accelerator`
    without `kwargs_handlers` of its own): `mixed_precision=accelerate_mixed_precision(
    "float8"), kwargs_handlers=accelerate_float8_handlers()`."""
    return (ctx.options.dtype == "float8" and switch.current is None
            and isinstance(switch.switch, ValueSwitch)
            and switch.switch.helper == "accelerate_mixed_precision"
            and isinstance(switch.node, cst.Call) and not any(
                (a.keyword is not None and a.keyword.value == "kwargs_handlers") or a.star
                for a in switch.node.args))


def _float8_message(switch: PrecisionSwitch) -> str:
    """What switches float8 on for `switch`'s framework, on a GPU with float8 tensor cores."""
    helper = switch.switch.helper if isinstance(switch.switch, ValueSwitch) else None
    how = _FLOAT8_SETTINGS.get(helper or switch.framework, _FLOAT8_THROUGH_ACCELERATE)
    return ("`--dtype float8`: the switch gets bfloat16; float8 is the framework's own "
            f"setting (a GPU with compute capability 8.9 or newer): {how}")


def switch_off_mixed_precision(ctx: RuleContext, settings: FrameworkSettings) -> None:
    """O0: take out a mixed-precision switch amprewrite added, and the import or definition
    its run-time choice used; a switch the author set (a plain value, which the rewrite also
    writes with `--plain --dtype`) stays, said so."""
    ours = {_normal(code) for code in _forms_written(ctx.facts)}
    taken_out: list[cst.CSTNode] = []
    for switch in settings.switches:
        container = switch.node
        items = container.elements if isinstance(container, cst.Dict) else container.args
        removed = [i for i in items if _normal(_item_code(ctx.facts, i)) in ours]
        if not removed:
            if switch.current is not None:
                current = ctx.facts.one_line(switch.current).rstrip(", ")
                ctx.notes.append(Note(AUTHORS_SWITCH_KEPT, switch.current,
                                      f"`{current}` is the script's own setting, not one "
                                      "amprewrite writes: kept at O0"))
            continue
        taken_out += removed
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
    os_import = _os_import_only_they_use(ctx.facts, taken_out)
    if os_import is not None:
        ctx.plan.replaces.append(Replace(os_import, remove))
        body = list(ctx.facts.module.body)
        after = body[body.index(os_import) + 1] if os_import is not body[-1] else None
        if isinstance(after, cst.SimpleStatementLine) and all(
                line.comment is None for line in after.leading_lines):  # its section's gap
            ctx.plan.replaces.append(Replace(after, lambda node: node.with_changes(
                leading_lines=os_import.leading_lines)))


def _os_import_only_they_use(facts: ModuleFacts, removed: list[cst.CSTNode]
                             ) -> Statement | None:
    """`import os`, when the plain style's `os.environ.get(...)` among `removed` are its only
    uses (the plain style added it with them)."""
    local = _os_name(facts)
    line = next((s for s in facts.module.body if isinstance(s, cst.SimpleStatementLine)
                 and len(s.body) == 1 and isinstance(s.body[0], cst.Import)
                 and len(s.body[0].names) == 1 and s.body[0].names[0].asname is None
                 and dotted(s.body[0].names[0].name) == "os"), None)
    if local != "os" or line is None or not removed:
        return None

    def uses(node: cst.CSTNode) -> int:
        return sum(isinstance(n, cst.Name) and n.value == "os" for n in descendants(node))

    return line if uses(facts.module) - uses(line) == sum(map(uses, removed)) else None


def _spelling(ctx: RuleContext, settings: FrameworkSettings) -> _Spelling:
    """The style's spelling, its import or definition added to the style's header."""
    assert ctx.style is not None
    dtype = ctx.options.autocast_dtype
    if not ctx.options.plain:
        wanted = sorted({_helper(switch.switch) for switch in settings.switches
                         if switch.current is None} | ({_FLOAT8_HANDLERS} if any(
                             _float8_recipe(ctx, switch) for switch in settings.switches)
                             else set()))
        code, local = runtime_import(ctx.facts, wanted, ctx.names)
        ctx.style.imports.append(code)
        return _Spelling(helpers=local)
    choice = None
    if not dtype and any(switch.current is None for switch in settings.switches):
        choice = ctx.names.fresh(_PLAIN_CHOICE)
        ctx.style.definitions.append(f"{choice} = {_plain_choice(ctx.torch())}")
    os = _os_name(ctx.facts)
    if os is None and any(isinstance(switch.switch, ValueSwitch) and switch.switch.env
                          and switch.current is None for switch in settings.switches):
        ctx.style.imports.append("import os")
    return _Spelling(choice=choice, os=os or "os")


def _helper(switch: ValueSwitch | FlagSwitch | SectionSwitch) -> str:
    return switch.helper if isinstance(switch, ValueSwitch) else _FLAG_HELPER


def _os_name(facts: ModuleFacts) -> str | None:
    return next((local for local, target in facts.imports.aliases.items() if target == "os"),
                None)


def _plain_choice(torch: str) -> str:
    """bfloat16 on the CPU and on CUDA devices with bfloat16 tensor cores."""
    return f"not {torch}.cuda.is_available() or {torch}.cuda.get_device_capability() >= (8, 0)"


def _new_items(
    ctx: RuleContext, switch: PrecisionSwitch, dtype: str | None, spelling: _Spelling
) -> list[cst.Arg | cst.DictElement]:
    gpu = None
    if isinstance(switch.switch, FlagSwitch) and not switch.on_cpu:
        gpu = f"{ctx.torch()}.cuda.is_available()"
    return [_parse_item(ctx, code)
            for code in _item_codes(switch.switch, dtype, spelling, gpu, switch.on_cpu)]


def _item_codes(
    switch: ValueSwitch | FlagSwitch | SectionSwitch, dtype: str | None, spelling: _Spelling,
    gpu: str | None = None, on_cpu: bool = False,
) -> list[str]:
    """The arguments or entries switching mixed precision on: for `dtype`, or (None) chosen
    at run time. Flags hold only where `gpu` (the expression telling a GPU is there) does;
    `on_cpu`: bfloat16, the Trainer's CPU dtype."""
    if isinstance(switch, ValueSwitch):
        value = [f"{switch.keyword}={_value(switch, dtype, spelling)}"]
        if dtype == "float8" and spelling.helpers is not None:
            value.append(f"kwargs_handlers={spelling.helpers[_FLOAT8_HANDLERS]}()")
        return value
    names = switch.flags if isinstance(switch, FlagSwitch) else switch.sections
    if on_cpu:
        dtype = "bfloat16"
    chosen = [dtype] if dtype else ["bfloat16", "float16"]
    values = {d: _flag(names[d], d, dtype, spelling, gpu) for d in chosen}
    if isinstance(switch, FlagSwitch):
        return [f"{names[d]}={value}" for d, value in values.items()]
    return [f'"{names[d]}": {{"enabled": {value}}}' for d, value in values.items()]


def _value(switch: ValueSwitch, dtype: str | None, spelling: _Spelling) -> str:
    if spelling.helpers is not None:
        helper = spelling.helpers[switch.helper]
        return f'{helper}("{dtype}")' if dtype else f"{helper}()"
    value = switch.values[dtype] if dtype else (
        f"{switch.values['bfloat16']} if {spelling.choice} else {switch.values['float16']}")
    return f'{spelling.os}.environ.get("{switch.env}", {value})' if switch.env else value


def _flag(name: str, dtype: str, asked: str | None, spelling: _Spelling, gpu: str | None
          ) -> str:
    """Whether flag `name` (for `dtype`) is on: `asked` is the dtype chosen at rewrite time
    (`--dtype`, or bfloat16 on the CPU), None when chosen at run time."""
    if spelling.helpers is not None:
        helper = spelling.helpers[_FLAG_HELPER]
        on = f'{helper}("{name}", "{asked}")' if asked else f'{helper}("{name}")'
    elif asked:
        on = "True"
    else:
        on = f"{spelling.choice}" if dtype == "bfloat16" else f"not {spelling.choice}"
    if gpu is None:
        return on
    return gpu if on == "True" else f"{gpu} and {on}"


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
        arguments = [i for i in items if isinstance(i, cst.Arg)]
        build = append_in_layout(container, arguments, ctx.facts, ctx.line_limit)
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
    """Every argument or entry the switch writes in a form only amprewrite writes (a runtime
    helper's call, the plain style's choice variable or launcher variable), for each way it
    may have chosen."""
    helpers = {target.rsplit(".", 1)[-1]: alias for alias, target in facts.imports.aliases.items()
               if target in {f"{RUNTIME_MODULE}.{name}" for name in _HELPERS}}
    # a helper the module does not import is never matched: its name is no Python name
    spellings = [_Spelling(helpers=dict.fromkeys(_HELPERS, "-") | helpers)] if helpers else []
    spellings += [_Spelling(choice=b.keys[0], os=_os_name(facts) or "os")
                  for b in _plain_choice_bindings(facts)]
    if _os_name(facts) is not None:
        spellings.append(_Spelling(os=_os_name(facts) or "os"))  # `--plain --dtype`
    gpu = f"{torch_name(facts) or 'torch'}.cuda.is_available()"
    for switch in [*switch_kinds(), DEEPSPEED_SECTIONS]:
        for spelling in spellings:
            dtypes: list[str | None] = (
                [None] if spelling.choice else ["bfloat16", "float16"] if not spelling.helpers
                else [None, "bfloat16", "float16"])
            for dtype in dtypes:
                codes = _item_codes(switch, dtype, spelling) + _item_codes(
                    switch, dtype, spelling, gpu)
                if spelling.helpers is None and spelling.choice is None:  # a plain value
                    codes = [c for c in codes if ".environ.get(" in c]
                yield from codes
            if spelling.helpers:
                yield from _item_codes(switch, None, spelling, on_cpu=True)
                if isinstance(switch, ValueSwitch) and switch.helper == (
                        "accelerate_mixed_precision"):
                    yield from _item_codes(switch, "float8", spelling)  # --dtype float8
        yield from _earlier_forms(facts, switch, gpu)


def _earlier_forms(facts: ModuleFacts, switch: ValueSwitch | FlagSwitch | SectionSwitch,
                   gpu: str) -> Iterator[str]:
    """What earlier rewrites wrote: `"bf16" if prefers_bfloat16() else "fp16"`."""
    for alias, target in facts.imports.aliases.items():
        if target != f"{RUNTIME_MODULE}.{_PREFERS_BFLOAT16}":
            continue
        prefers = f"{alias}()"
        if isinstance(switch, ValueSwitch):
            yield (f"{switch.keyword}={switch.values['bfloat16']} if {prefers} else "
                   f"{switch.values['float16']}")
            continue
        names = switch.flags if isinstance(switch, FlagSwitch) else switch.sections
        for value in ({"bfloat16": prefers, "float16": f"not {prefers}"},
                      {"bfloat16": f"{gpu} and {prefers}", "float16": f"{gpu} and not {prefers}"}):
            for dtype, on in value.items():
                yield (f"{names[dtype]}={on}" if isinstance(switch, FlagSwitch)
                       else f'"{names[dtype]}": {{"enabled": {on}}}')


def _plain_choice_bindings(facts: ModuleFacts) -> list[Binding]:
    torch = torch_name(facts) or "torch"
    return [b for b in facts.bindings if b.function is None and len(b.keys) == 1
            and b.keys[0].startswith(_PLAIN_CHOICE)
            and _normal(facts.one_line(_unparenthesised(b.value)))
            == _normal(_plain_choice(torch))]


def _unparenthesised(value: cst.CSTNode) -> cst.CSTNode:
    """`(a or b)` -> `a or b`: the parentheses a wrapped line's value gets
    (`line_fitting`)."""
    return value.with_changes(lpar=[], rpar=[]) if getattr(value, "lpar", None) else value


def _run_time_choice_statements(facts: ModuleFacts) -> list[Statement]:
    """The runtime import of the switch's helpers alone, and the plain style's definition."""
    found: list[Statement] = [b.statement for b in _plain_choice_bindings(facts)]
    helpers = {_PREFERS_BFLOAT16, *_HELPERS}
    for statement in facts.module.body:
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
            small = statement.body[0]
            if (isinstance(small, cst.ImportFrom) and isinstance(small.module, cst.Name)
                    and small.module.value == RUNTIME_MODULE
                    and isinstance(small.names, Sequence)
                    and all(alias.evaluated_name in helpers for alias in small.names)):
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
from amprewrite_runtime import accelerate_mixed_precision

accelerator = Accelerator(mixed_precision=accelerate_mixed_precision())
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for x, y in loader:
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
""",
        codes=(FRAMEWORK_SWITCHED_ON,),
    ),
    Example(
        before="""\
import lightning as L

trainer = L.Trainer(max_epochs=3, precision="16-mixed")
trainer.fit(model, loader)
""",
        after=None,
        codes=(AUTHORS_SWITCH_KEPT,), options=Options(opt_level="O0"),
    ),
    Example(
        before=MIXED_PRECISION_ALREADY,
        after=None,
        codes=(),
    ),
)


RULE = rule("framework-switch", (FRAMEWORK_SWITCHED_ON, FRAMEWORK_PRECISION_SET,
                                 FRAMEWORK_OWNS_PRECISION, FRAMEWORK_SETTING_OUT_OF_SIGHT,
                                 FRAMEWORK_BYPASSED, AUTHORS_SWITCH_KEPT, FRAMEWORK_FLOAT8),
            _plan,
            examples=_FRAMEWORK_SWITCH_EXAMPLES, reports=(MIXED_PRECISION_REMOVED,))
