"""apex.amp to native AMP, first phase: take apex out, leaving plain FP32 code and the options
`amp.initialize` asked for; the regular rewrite then adds native AMP at that opt level."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis.apex_amp import ApexAmp, initialized
from amprewrite.analysis.facts import Statement, body
from amprewrite.analysis.names import dotted
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, SKIP, declare
from amprewrite.options import OPT_LEVELS, Options
from amprewrite.rules.context import RuleContext
from amprewrite.rules.edits import as_receiver, in_place_of, remove, without
from amprewrite.rules.registry import Example, rule
from amprewrite.rules.shared_examples import MIXED_PRECISION_ALREADY
from amprewrite.transform import Replace

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis


APEX_FEATURE_DROPPED = declare(
    "AMP402", SKIP, "apex.amp feature without a native equivalent",
    "apex.amp is gone (removed from apex in 2025): remove the call; `num_losses` is dropped "
    "because one native scaler serves every loss.",
    why=(
        "An apex.amp feature has no native equivalent (`num_losses`, `amp.register_*`, "
        "`amp.master_params` outside a migration)."
    ),
    example=(
        "model, optimizer = amp.initialize(model, optimizer, num_losses=2)   # "
        "num_losses dropped"
    ),
)

APEX_INITIALIZE_MIGRATED = declare(
    "AMP410", CHANGE, "apex `amp.initialize` migrated",
    "A native `GradScaler` keeps the opt level and properties; `scaler.initialize(model, "
    "optimizer)` casts the model at O2/O3.",
    why="The script calls apex's `amp.initialize`.",
)

APEX_SCALE_LOSS_MIGRATED = declare(
    "AMP411", CHANGE, "apex `amp.scale_loss` migrated",
    "`with amp.scale_loss(loss, optimizer) as s: s.backward()` is now "
    "`scaler.scale(loss).backward()`.",
    why="The script scales its loss with apex's `amp.scale_loss`.",
)

APEX_STATE_MIGRATED = declare(
    "AMP412", CHANGE, "apex checkpoint state migrated",
    "`amp.state_dict()` entries are replaced by the scaler's state, saved next to the "
    "optimizer's; `amp.load_state_dict` by the scaler's restore.",
    why="A checkpoint saves `amp.state_dict()` or restores it with `amp.load_state_dict`.",
    example=(
        "-checkpoint = {\"optimizer\": optimizer.state_dict(), \"amp\": amp.state_dict()}\n"
        "+checkpoint = {\"optimizer\": optimizer.state_dict(), \"scaler\": "
        "scaler.state_dict()}"
    ),
)

APEX_KEPT_BESIDE_OWN_AMP = declare(
    "AMP413", SKIP,
    "apex.amp kept: the file's own torch AMP keeps its migration from being rewritten",
    "Migrate this apex code by hand (or remove it): taken out, it would leave plain FP32 code, "
    "and the rewrite does not add a scaler to a file whose mixed precision is its author's.",
    why=(
        "The file uses apex.amp and also its own torch AMP (a grad scaler): the apex code "
        "taken out would be plain FP32, and the rewrite leaves a file whose precision is its "
        "author's to the lint, so apex would be gone with nothing in its place (a wrapper "
        "class around `amp.scale_loss` beside one around `torch.amp.GradScaler`, as timm's "
        "ApexScaler and NativeScaler)."
    ),
    example=(
        "class ApexScaler:\n"
        "    def __call__(self, loss, optimizer):\n"
        "        with amp.scale_loss(loss, optimizer) as scaled_loss:   # kept, AMP413\n"
        "            scaled_loss.backward()\n"
        "        optimizer.step()\n"
        "class NativeScaler:\n"
        "    def __init__(self):\n"
        "        self._scaler = torch.amp.GradScaler(\"cuda\")"
    ),
)

_MIGRATED = (APEX_INITIALIZE_MIGRATED, APEX_SCALE_LOSS_MIGRATED, APEX_STATE_MIGRATED)


def migration_refused(ctx: RuleContext) -> list[Note]:
    """AMP413 where the apex migration planned in `ctx` changed something, for a migration
    that is not carried out."""
    return [Note(APEX_KEPT_BESIDE_OWN_AMP, note.node,
                 "apex.amp kept as written: this file's own torch AMP (a grad scaler) keeps "
                 "the rewrite from scaling what its migration would leave FP32; migrate it by "
                 "hand")
            for note in ctx.notes if note.code in _MIGRATED]


_PROPERTIES = ("keep_batchnorm_fp32", "master_weights", "loss_scale")


def remove_apex(ctx: RuleContext, apex: ApexAmp) -> Options:
    """Plan the removal of apex.amp; return the options the native rewrite must use."""
    emptied = _emptied(apex, ctx)
    for statement in emptied:
        ctx.plan.replaces.append(Replace(statement, remove))
        _keep_lines_above(statement, emptied, ctx)
    options = ctx.options
    for statement, call in apex.initialize:
        if not _initialize_goes(statement, call):
            ctx.plan.replaces.append(Replace(call, _initialize_result(statement, call)))
        options = _options_from(call, _flag_of(statement, ctx), ctx)
        ctx.notes.append(Note(APEX_INITIALIZE_MIGRATED, statement,
                              f"apex `{ctx.facts.one_line(call.func)}(...)` migrated: a "
                              "native `GradScaler` with the same opt level and properties"))
    for block in apex.scale_loss:
        ctx.plan.replaces.append(Replace(block, _plain_backward))
        item = block.items[0].item
        assert isinstance(item, cst.Call)
        ctx.notes.append(Note(APEX_SCALE_LOSS_MIGRATED, block,
                              f"apex `{ctx.facts.one_line(item.func)}(...)` migrated to "
                              "`scaler.scale(loss).backward()`"))
    for call in apex.master_params:
        optimizer = dotted(call.args[0].value) if call.args else None
        model = apex.models.get(optimizer or "")
        code = (f"{model}.parameters()" if model else
                f"(p for group in {optimizer}.param_groups for p in group[\"params\"])")
        parameters = ctx.parse_expression(code)
        ctx.plan.replaces.append(Replace(call, lambda _, new=parameters: new))
    for container, entry in apex.state_entries:
        ctx.plan.replaces.append(Replace(container, without(container, entry)))
        ctx.notes.append(Note(APEX_STATE_MIGRATED, entry,
                              "apex's `amp.state_dict()` entry replaced by the "
                              "scaler's state next to the optimizer's"))
    for call in apex.unsupported:
        text = ctx.facts.one_line(call.func)
        ctx.notes.append(Note(APEX_FEATURE_DROPPED, call,
                              f"`{text}(...)` has no native equivalent and "
                              "needs apex; remove it"))
    return options


def _flag_of(statement: Statement, ctx: RuleContext) -> str | None:
    """`args.amp` for an `amp.initialize` run only `if args.amp:` (its `if`'s body, no
    `else`): apex is then off unless the flag is set, and stays so."""
    parent = ctx.facts.statements[statement].parent
    if (isinstance(parent, cst.If) and parent.orelse is None
            and statement in parent.body.body):
        return ctx.facts.one_line(parent.test)
    return None


def _emptied(apex: ApexAmp, ctx: RuleContext) -> list[Statement]:
    """The statements to take out: apex's imports and state, and the initialize calls that
    keep no bindings; an `if args.amp:` left with nothing else in it goes whole."""
    gone = [*apex.imports, *apex.state_statements]
    gone += [statement for statement, call in apex.initialize
             if _initialize_goes(statement, call)]
    taken: list[Statement] = []
    for statement in gone:
        parent = ctx.facts.statements[statement].parent
        if (isinstance(parent, cst.If) and parent.orelse is None
                and all(s in gone for s in parent.body.body)):
            if parent not in taken:
                taken.append(parent)
        else:
            taken.append(statement)
    return taken


def _keep_lines_above(statement: Statement, emptied: list[Statement], ctx: RuleContext) -> None:
    """The blank lines and comments above a removed import stay above the next import kept
    (`import apex` opening the third-party imports: the section keeps its blank line)."""
    lines = statement.leading_lines
    if not lines or not _imports(statement):
        return
    block, index = ctx.facts.position(statement)
    following = next((s for s in body(block)[index + 1:] if s not in emptied), None)
    if following is not None and _imports(following):
        ctx.plan.replaces.append(Replace(following, lambda node: node.with_changes(
            leading_lines=[*lines, *node.leading_lines])))


def _imports(statement: Statement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and all(
        isinstance(small, cst.Import | cst.ImportFrom) for small in statement.body)


def _options_from(call: cst.Call, flag: str | None, ctx: RuleContext) -> Options:
    """The opt level and properties `amp.initialize` was given, as `GradScaler` arguments;
    behind a flag, the level is "O0" (FP32) when the flag is not set."""
    keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    code = ctx.facts.module.code_for_node
    enabled = keywords.get("enabled")  # `enabled=args.fp16`: apex is off unless it holds
    if enabled is not None and not (isinstance(enabled, cst.Name) and enabled.value == "True"):
        switch = _operand(code(enabled))
        flag = switch if flag is None else f"{_operand(flag)} and {switch}"
    arguments = []
    level_node = keywords.get("opt_level")
    level = "O1"
    if level_node is not None:
        literal = level_node.evaluated_value if isinstance(level_node, cst.SimpleString) else None
        level = literal if literal in OPT_LEVELS else "O2"  # dynamic: keep initialize in place
        if literal != "O1":
            arguments.append(code(level_node))
    if flag is not None:
        level_code = arguments.pop(0) if arguments else '"O1"'
        arguments.insert(0, f'{level_code} if {flag} else "O0"')
        level = "O2"  # the level is chosen at run time: the rewrite holds at every level
    for name in _PROPERTIES:
        if name in keywords:
            arguments.append(f"{name}={code(keywords[name])}")
    if "num_losses" in keywords:
        ctx.notes.append(Note(APEX_FEATURE_DROPPED, keywords["num_losses"], "`num_losses`: one "
                              "native scaler serves every loss; the argument is dropped"))
    ctx.scaler_arguments = tuple(arguments)
    return replace(ctx.options, opt_level=level)


def _operand(test: str) -> str:
    """`test` as an operand of `and`: a dotted name as it is, anything else parenthesized."""
    return test if all(part.isidentifier() for part in test.split(".")) else f"({test})"


def _initialize_goes(statement: Statement, call: cst.Call) -> bool:
    """The statement holds the call alone, its result dropped or bound back to what it was
    given (`model, optimizer = amp.initialize(model, optimizers=optimizer)`)."""
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1):
        return False
    small = statement.body[0]
    if isinstance(small, cst.Expr):
        return small.value is call
    if not (isinstance(small, cst.Assign) and small.value is call and len(small.targets) == 1):
        return False
    target = small.targets[0].target
    targets = [e.value for e in target.elements] if isinstance(
        target, cst.Tuple | cst.List) else [target]
    return [dotted(t) for t in targets] == [dotted(g) for g in initialized(call)]


def _initialize_result(statement: Statement, call: cst.Call):  # type: ignore[no-untyped-def]
    """`amp.initialize(net, opt, ...)` -> `net, opt`, what it returned (`m = amp.initialize(
    net)`: `net` alone); parenthesized unless it is an assignment's whole value."""
    given = initialized(call)
    bare = isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(small, cst.Assign) and small.value is call for small in statement.body)

    def build(node: cst.CSTNode) -> cst.CSTNode:
        if len(given) == 1:
            return given[0]
        value = cst.Tuple([cst.Element(g) for g in given])
        return value.with_changes(lpar=[], rpar=[]) if bare else value

    return build


def _plain_backward(node: cst.CSTNode) -> cst.CSTNode | cst.FlattenSentinel:
    """`with amp.scale_loss(loss, opt) as scaled: scaled.backward()` -> `loss.backward()`."""
    assert isinstance(node, cst.With)
    item = node.items[0]
    assert isinstance(item.item, cst.Call)
    loss = item.item.args[0].value
    loss = as_receiver(loss)
    name = dotted(item.asname.name) if item.asname is not None else None
    return in_place_of(node, [s.visit(_Substitute(name, loss)) for s in node.body.body])


class _Substitute(cst.CSTTransformer):
    def __init__(self, name: str | None, value: cst.BaseExpression) -> None:
        super().__init__()
        self.name, self.value = name, value

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        return self.value if original_node.value == self.name else updated_node


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    if analysis.apex:
        ctx.next_options = remove_apex(ctx, analysis.apex)


_MIGRATE_APEX_EXAMPLES = (
    Example(
        before="""\
import torch
from apex import amp

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    with amp.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
    optimizer.step()
""",
        after="""\
import torch
from amprewrite_runtime import GradScaler, autocast

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = GradScaler()
for x, y in loader:
    optimizer.zero_grad()
    with autocast():
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        codes=(APEX_INITIALIZE_MIGRATED, APEX_SCALE_LOSS_MIGRATED),
    ),
    Example(
        before=MIXED_PRECISION_ALREADY,
        after=None,
        codes=(),
    ),
)


RULE = rule("migrate-apex", (APEX_INITIALIZE_MIGRATED, APEX_SCALE_LOSS_MIGRATED,
                             APEX_STATE_MIGRATED, APEX_FEATURE_DROPPED), _plan,
            examples=_MIGRATE_APEX_EXAMPLES)
