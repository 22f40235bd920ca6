"""`--reproducible`: seed everything at the entry point; seed the training DataLoaders."""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from amprewrite.analysis.entry_point import EntryPoint
from amprewrite.analysis.facts import CallSite
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, SKIP, declare
from amprewrite.options import Options
from amprewrite.rules.context import RuleContext
from amprewrite.rules.registry import Example, rule
from amprewrite.transform import Insert, Replace

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis


REPRODUCIBILITY_ENABLED = declare(
    "AMP501", CHANGE, "reproducibility enabled at the entry point",
    "`enable_reproducibility(seed)` seeds random, numpy and torch, and makes cuDNN and torch "
    "deterministic (see docs/reproducibility.md).",
)

LOADER_OUTSIDE_ENTRY = declare(
    "AMP502", SKIP, "training DataLoader outside the entry point",
    "Pass `generator=` and `worker_init_fn=` from `enable_reproducibility`'s result to it by "
    "hand.",
)

LOADER_SEEDED = declare(
    "AMP503", CHANGE, "shuffled DataLoader seeded",
    "Its shuffling and its workers' seeds now derive from the seed.",
)


def seed_everything(
    ctx: RuleContext, entry: EntryPoint, loaders: list[CallSite], function_name: str
) -> None:
    name = ctx.names.fresh(("seeding", "reproducibility"))
    code = f"{name} = {function_name}({ctx.options.seed})"
    ctx.plan.inserts.append(Insert(entry.block, entry.index, [ctx.parse_statement(code)]))
    anchor = entry.block.body[min(entry.index, len(entry.block.body) - 1)]
    ctx.notes.append(Note(REPRODUCIBILITY_ENABLED, anchor,
                          f"`{code}` seeds random, numpy and torch and makes "
                          "cuDNN and torch deterministic"))
    for site in loaders:
        if site.function is not entry.function or not _inside(entry, site, ctx):
            ctx.notes.append(Note(LOADER_OUTSIDE_ENTRY, site.call,
                                  "training DataLoader outside the entry "
                                  f"point: pass `generator=` and `worker_init_fn=` from `{name}` "
                                  "to it by hand"))
            continue
        extra = [_keyword("generator", ctx.parse_expression(f"{name}.generator")),
                 _keyword("worker_init_fn", ctx.parse_expression(f"{name}.worker_init_fn"))]
        ctx.plan.replaces.append(Replace(site.call, _with_arguments(extra)))
        ctx.notes.append(Note(LOADER_SEEDED, site.call, f"shuffled DataLoader seeded from `{name}` "
                              "(`generator=`, `worker_init_fn=`)"))


def _inside(entry: EntryPoint, site: CallSite, ctx: RuleContext) -> bool:
    return any(ctx.facts.statements.get(s) is not None and ctx.facts.statements[s].block
               is entry.block for s in ctx.facts.enclosing_statements(site.statement))


def _keyword(name: str, value: cst.BaseExpression) -> cst.Arg:
    return cst.Arg(value=value, keyword=cst.Name(name),
                   equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                         whitespace_after=cst.SimpleWhitespace("")))


def _with_arguments(extra: list[cst.Arg]):  # type: ignore[no-untyped-def]
    def build(node: cst.CSTNode) -> cst.CSTNode:
        assert isinstance(node, cst.Call)
        args = list(node.args)
        last = args[-1]
        if last.comma is cst.MaybeSentinel.DEFAULT:  # `DataLoader(ds, shuffle=True)`
            comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
            args[-1] = last.with_changes(comma=comma)
            extra[0] = extra[0].with_changes(comma=comma)
            return node.with_changes(args=[*args, *extra])
        # a trailing comma (often one argument per line): each new argument on its own line
        separator = args[-2].comma if len(args) > 1 else last.comma
        args[-1] = last.with_changes(comma=separator)
        added = [extra[0].with_changes(comma=separator), extra[1].with_changes(comma=last.comma)]
        return node.with_changes(args=[*args, *added])

    return build


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    if ctx.options.reproducible and ctx.style is not None:
        seed_everything(ctx, analysis.entry, analysis.loaders, ctx.style.seeding)


_REPRODUCIBILITY_EXAMPLES = (
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def main():
    loader = torch.utils.data.DataLoader(
        dataset,
        shuffle=True)
    for x, y in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
""",
        after="""\
import torch
from amprewrite_runtime import GradScaler, autocast, enable_reproducibility

scaler = GradScaler()

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def main():
    seeding = enable_reproducibility(0)
    loader = torch.utils.data.DataLoader(
        dataset,
        shuffle=True, generator=seeding.generator, worker_init_fn=seeding.worker_init_fn)
    for x, y in loader:
        optimizer.zero_grad()
        with autocast():
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


if __name__ == "__main__":
    main()
""",
        codes=(REPRODUCIBILITY_ENABLED, LOADER_SEEDED), options=Options(reproducible=True),
    ),
)


RULE = rule("reproducibility",
            (REPRODUCIBILITY_ENABLED, LOADER_OUTSIDE_ENTRY, LOADER_SEEDED), _plan,
            examples=_REPRODUCIBILITY_EXAMPLES)
