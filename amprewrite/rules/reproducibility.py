"""`--reproducible`: seed everything at the entry point; seed the training DataLoaders."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amprewrite.analysis.entry_point import EntryPoint
from amprewrite.analysis.facts import CallSite
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, SKIP, declare
from amprewrite.options import Options
from amprewrite.rules.context import RuleContext
from amprewrite.rules.edits import append_arguments, keyword
from amprewrite.rules.registry import Example, rule
from amprewrite.rules.shared_examples import MIXED_PRECISION_ALREADY
from amprewrite.transform import Insert, Replace

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis


REPRODUCIBILITY_ENABLED = declare(
    "AMP501", CHANGE, "reproducibility enabled at the entry point",
    "`enable_reproducibility(seed)` seeds random, numpy and torch, and makes cuDNN and torch "
    "deterministic (see docs/reproducibility.md).",
    why="`--reproducible` was given: the entry point gets the seeding call.",
)

LOADER_OUTSIDE_ENTRY = declare(
    "AMP502", SKIP, "training DataLoader outside the entry point",
    "Pass `generator=` and `worker_init_fn=` from `enable_reproducibility`'s result to it by "
    "hand.",
    why=(
        "`--reproducible` was given and a training DataLoader is built outside the "
        "entry point, where its generator is not in reach."
    ),
    example=(
        "def build_loader(ds):\n"
        "    return DataLoader(ds, shuffle=True)   # pass generator= and "
        "worker_init_fn= by hand"
    ),
)

LOADER_SEEDED = declare(
    "AMP503", CHANGE, "shuffled DataLoader seeded",
    "Its shuffling and its workers' seeds now derive from the seed.",
    why=(
        "`--reproducible` was given and a shuffled DataLoader is built where the "
        "seeding result is in reach."
    ),
)


def seed_everything(
    ctx: RuleContext, entry: EntryPoint, loaders: list[CallSite], function_name: str
) -> None:
    name = ctx.names.fresh(("seeding", "reproducibility"))
    code = f"{name} = {function_name}({ctx.options.seed})"
    ctx.plan.inserts.append(Insert(entry.block, entry.index, [ctx.parse_statement(code)]))
    anchor = entry.block.body[min(entry.index, len(entry.block.body) - 1)]
    ctx.notes.append(Note(REPRODUCIBILITY_ENABLED, anchor,
                          f"`{code}` added at the entry point: it seeds random, numpy "
                          "and torch and makes cuDNN and torch deterministic"))
    for site in loaders:
        if site.function is not entry.function or not _inside(entry, site, ctx):
            ctx.notes.append(Note(LOADER_OUTSIDE_ENTRY, site.call,
                                  "training DataLoader outside the entry "
                                  f"point: pass `generator=` and `worker_init_fn=` from `{name}` "
                                  "to it by hand"))
            continue
        extra = [keyword("generator", ctx.parse_expression(f"{name}.generator")),
                 keyword("worker_init_fn", ctx.parse_expression(f"{name}.worker_init_fn"))]
        ctx.plan.replaces.append(Replace(site.call, append_arguments(extra)))
        ctx.notes.append(Note(LOADER_SEEDED, site.call, f"shuffled DataLoader seeded from `{name}` "
                              "(`generator=`, `worker_init_fn=`)"))


def _inside(entry: EntryPoint, site: CallSite, ctx: RuleContext) -> bool:
    return any(ctx.facts.statements.get(s) is not None and ctx.facts.statements[s].block
               is entry.block for s in ctx.facts.enclosing_statements(site.statement))




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
        shuffle=True, generator=seeding.generator,
        worker_init_fn=seeding.worker_init_fn)
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
    Example(
        before=MIXED_PRECISION_ALREADY,
        after=None,
        codes=(), options=Options(reproducible=True),
    ),
)


RULE = rule("reproducibility",
            (REPRODUCIBILITY_ENABLED, LOADER_OUTSIDE_ENTRY, LOADER_SEEDED), _plan,
            examples=_REPRODUCIBILITY_EXAMPLES)
