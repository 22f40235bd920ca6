"""The mixed-precision recipe for O1-O3: which rules run, in which output style.

O1 is autocast around forward passes and losses with dynamic loss scaling. O2/O3 add
`scaler.initialize(model, optimizer)` after each optimizer is built (the runtime casts the
model, and keeps master weights at O2); their autocast regions stay in the script, inactive
unless `AMPREWRITE_OPT_LEVEL=O1` switches the same script to O1.

Every decision two rules share is made here, before any rule runs: the output style, where
the one scaler lives and what it is called, the variable a loss computed inside `.backward()`
is hoisted into, and the variable holding the scale a plain-style scheduler guard compares.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis import ModuleAnalysis
from amprewrite.analysis.names import FreshNames
from amprewrite.analysis.scaler_home import (
    SCALER_NAMES,
    Use,
    attribute_home,
    bound_before,
    find_scaler_home,
    keyword_argument,
)
from amprewrite.options import Options
from amprewrite.recipes.recipe import Recipe
from amprewrite.rules import (
    autocast,
    autocast_regions,
    checkpoint,
    custom_functions,
    distributions,
    escapes,
    float8,
    float16_constants,
    float32_arguments,
    fsdp_policy,
    loss_scaling,
    model_casting,
    reproducibility,
    scaler_creation,
    scaler_threading,
    scheduler_guard,
    sigmoid_saturation,
    sites_left_alone,
    unscaling,
)
from amprewrite.rules.context import RuleContext
from amprewrite.rules.import_order import import_index, standard_library_index
from amprewrite.rules.styles import (
    Needs,
    defer_to_initialize,
    off_when,
    plain_style,
    runtime_style,
)
from amprewrite.transform import Insert, Replace

if TYPE_CHECKING:
    from amprewrite.project.links import ModuleLinks


def _context(analysis: ModuleAnalysis, options: Options) -> RuleContext:
    if options.dtype is None and analysis.amp_in_training.dtype is not None:
        options = replace(options, dtype=analysis.amp_in_training.dtype)  # the author's choice
    facts, training, links = analysis.facts, analysis.training, analysis.links
    unscaled = options.plain and options.dtype == "bfloat16"  # torch.amp: bfloat16 needs none
    scaling = (training.found or bool(links)) and not unscaled
    needs = Needs(
        scaler=scaling and not (links and links.inherited),  # a base class builds that one
        autocast=any(split.autocasts for split in autocast_regions.splits(analysis))
        and not analysis.escapes.stuck,
        custom_functions=bool(analysis.custom_functions),
        sharded=analysis.sharded,
        reproducible=options.reproducible,
        integer_safe_casts=not analysis.escapes.stuck
        and any(not escape.floating for escape in analysis.escapes.casts),
        fsdp_policy=fsdp_policy.wants_policies(analysis, options)
        and any(wrap.current is None for wrap in analysis.sharding_wraps),
        float8=bool(float8.float8_plan(analysis, options).conversions),
        float32_sigmoid=not options.plain and any(
            found.sequential is not None for found in analysis.saturating),
    )
    names = FreshNames(facts.names)
    optional_apex = analysis.amp_in_training.optional_apex
    carried = analysis.scaler_arguments or (  # `"O0" if args.fp16 else "O1"`: apex's path
        off_when(optional_apex.test, options, needs) if optional_apex else None)
    style = (plain_style if options.plain else runtime_style)(
        facts, options, needs, carried, names)
    ctx = RuleContext(facts, options, style.autocast, style=style, names=names)
    ctx.level_at_run_time = bool(carried) and not keyword_argument(carried[0]) and (
        not carried[0].startswith(('"O', "'O")) or optional_apex is not None)
    if not analysis.escapes.stuck:
        autocast.decide_hoisted_losses(ctx, [r for s in autocast_regions.splits(analysis)
                                             for r in s.regions])
    if scaling:
        _decide_scaler(ctx, analysis, carried)
    return ctx


def _decide_scaler(
    ctx: RuleContext, analysis: ModuleAnalysis, carried: tuple[str, ...] | None
) -> None:
    training, checkpoints, options = analysis.training, analysis.checkpoints, ctx.options
    builds = analysis.optimizer_builds if options.casts_model else []
    uses = [*training.backwards, *training.steps, *training.unscales, *(b.binding for b in builds),
            *(s.site for s in checkpoints.saved), *(r.site for r in checkpoints.restored),
            *(r.site for r in checkpoints.by_keyword), *checkpoints.assigned]
    optimizers = {s.key for s in training.steps}
    name = ctx.names.fresh(SCALER_NAMES)
    if analysis.links:
        uses = _linked_scaler(ctx, analysis.links, uses, optimizers, name)
    if uses:  # else every use is in a function that receives the scaler
        home = find_scaler_home(ctx.facts, uses, optimizers, _global_index(analysis, carried),
                                name)
        ctx.scaler_home = home
        ctx.scaler_expr = home.expression
        if (home.scope == "global" and carried and ctx.style is not None
                and not bound_before(carried, home.index, ctx.facts)):
            ctx.style.scaler, ctx.initialize_arguments = defer_to_initialize(
                ctx.style.scaler, carried)
    if options.plain:
        scheduler_guard.decide_scale_variables(ctx, analysis.schedulers)


def _linked_scaler(
    ctx: RuleContext, links: ModuleLinks, uses: list[Use], optimizers: set[str | None],
    name: str,
) -> list[Use]:
    """A project's decisions about this module's scaler: inherited from a base class in
    another module, created by this base class for its subclasses, received as a parameter,
    or passed on. Returns the uses a scaler of the module's own must reach (`optimizers`
    gains those passed on, which it is created after)."""
    if links.inherited is not None:
        ctx.scaler_expr = links.inherited.expression
        return []
    if links.base_home is not None:
        home = attribute_home(ctx.facts, links.base_home.cls, set(links.base_home.optimizers),
                              name)
        if home is not None:  # `links` saw to it: the base class has an `__init__` block
            ctx.scaler_home, ctx.scaler_expr = home, home.expression
        return []
    uses = [*uses, *(p.site for p in links.passes)]
    optimizers |= {key for p in links.passes for key in p.optimizers}
    if links.receives_in_class:
        return uses  # `self.scaler`, created in `__init__` from the parameter
    received = {p.function for p in links.parameters}
    ctx.scaler_expr = name
    return [use for use in uses if use.function not in received]


def _global_index(analysis: ModuleAnalysis, carried: tuple[str, ...] | None) -> int:
    """Where a module-global scaler goes: after the imports, unless its arguments come from
    the script (`GradScaler(args.opt_level)` after an apex migration): then right after the
    module-level optimizer build, where those names exist."""
    facts = analysis.facts
    if carried:
        module_level = [facts.position(b.binding.statement)[1] for b in analysis.optimizer_builds
                        if b.binding.function is None
                        and facts.statements[b.binding.statement].parent is None]
        if module_level:
            return max(module_level) + 1
    return facts.header_imports_end


def place_header(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    """The style's imports and module-level definitions, first among the inserts at their
    index (before any statement that index precedes)."""
    header = []
    for position, code in enumerate(ctx.style.definitions):
        line = ctx.parse_statement(code)
        header.append(line.with_changes(leading_lines=[cst.EmptyLine()]) if position == 0 else line)
    index = ctx.facts.header_imports_end
    ctx.plan.inserts.insert(0, Insert(ctx.facts.module, index, header))
    opened: set[int] = set()  # indices whose section an added import opens already
    for position, code in enumerate(ctx.style.imports):
        _insert_import(ctx, ctx.parse_statement(code), position, opened)
    body = ctx.facts.module.body
    if index == 0 and body and isinstance(body[0], cst.FunctionDef | cst.ClassDef) and len(
            body[0].leading_lines) < 2:  # a file without imports: PEP 8's two lines
        ctx.plan.replaces.append(Replace(body[0], _two_blank_lines_before))


def _insert_import(
    ctx: RuleContext, statement: cst.SimpleStatementLine, position: int, opened: set[int]
) -> None:
    """`statement` where isort would put it, first among the inserts at its index (in the
    style's order); the first at the top of a section takes over the section's blank lines,
    and a standard-library import in a module without that section opens one."""
    standard = standard_library_index(ctx.facts, statement)
    if standard is not None and standard[2]:
        opening = ctx.facts.module.body[standard[0]]
        statement = statement.with_changes(leading_lines=opening.leading_lines)
        ctx.plan.replaces.append(Replace(opening, _one_line_before))
        ctx.plan.inserts.insert(0, Insert(ctx.facts.module, standard[0], [statement]))
        return
    index, opens_section = standard[:2] if standard else import_index(ctx.facts, statement)
    if opens_section and index not in opened:
        opened.add(index)
        opening = ctx.facts.module.body[index]
        statement = statement.with_changes(leading_lines=opening.leading_lines)
        ctx.plan.replaces.append(Replace(opening, _no_lines_before))
    ctx.plan.inserts.insert(position, Insert(ctx.facts.module, index, [statement]))


def _no_lines_before(node: cst.CSTNode) -> cst.CSTNode:
    return node.with_changes(leading_lines=[])


def _one_line_before(node: cst.CSTNode) -> cst.CSTNode:
    return node.with_changes(leading_lines=[cst.EmptyLine()])


def _two_blank_lines_before(node: cst.CSTNode) -> cst.CSTNode:
    assert isinstance(node, cst.FunctionDef | cst.ClassDef)
    missing = 2 - len(node.leading_lines)
    return node.with_changes(leading_lines=[*[cst.EmptyLine()] * missing, *node.leading_lines])


MIXED_PRECISION = Recipe(
    name="mixed-precision",
    applies=lambda analysis, options: True,
    context=_context,
    rules=(
        sites_left_alone.RULE,
        autocast_regions.RULE,
        float32_arguments.RULE,
        float16_constants.RULE,
        distributions.RULE,
        escapes.RULE,
        sigmoid_saturation.RULE,
        custom_functions.RULE,
        scaler_creation.RULE,
        scaler_threading.RULE,
        float8.RULE,
        fsdp_policy.RULE,
        model_casting.RULE,
        loss_scaling.RULE,
        scheduler_guard.RULE,
        unscaling.RULE,
        checkpoint.RULE,
        reproducibility.RULE,
    ),
    finish=place_header,
)
