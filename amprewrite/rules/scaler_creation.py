"""Create the one grad scaler where every site using it can reach it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amprewrite.analysis.facts import body
from amprewrite.analysis.scaler_home import ScalerHome
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, declare
from amprewrite.options import Options
from amprewrite.rules.context import RuleContext
from amprewrite.rules.registry import Example, rule
from amprewrite.rules.shared_examples import MIXED_PRECISION_ALREADY
from amprewrite.transform import Insert

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis


SCALER_CREATED = declare(
    "AMP100", CHANGE, "grad scaler created",
    "One scaler serves every training step it can reach.",
    why=(
        "The rewrite scales a backward pass and needs one grad scaler for it: it is "
        "created next to the optimizer it serves."
    ),
)

_WHERE = {
    "attribute": "in `__init__`, next to the optimizer",
    "local": "right after the optimizer is built",
    "global": "as a module global after the imports, so every function using it reaches it",
}


def create_scaler(
    ctx: RuleContext, home: ScalerHome, constructor: str, header_index: int
) -> str | None:
    """Plan `scaler = GradScaler(...)`; one that belongs to the module header (a global right
    after the imports) is returned for the header instead."""
    statements = body(home.block)
    code = f"{home.expression} = {constructor}"
    anchor = statements[min(home.index, len(statements)) - 1] if home.index > 0 else statements[0]
    ctx.notes.append(Note(SCALER_CREATED, anchor,
                          f"grad scaler `{home.expression}` created {_WHERE[home.scope]}"))
    if home.scope == "global" and home.index == header_index:
        return code
    ctx.plan.inserts.append(Insert(home.block, home.index, [ctx.parse_statement(code)]))
    return None


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    if ctx.scaler_home is not None and ctx.style is not None:
        constructor = ctx.style.scaler
        links = analysis.links
        if links and links.receives_in_class:  # `__init__` got the scaler as a parameter
            constructor = f"{links.parameters[0].name} or {constructor}"
        code = create_scaler(ctx, ctx.scaler_home, constructor, ctx.facts.header_imports_end)
        if code is not None:
            ctx.style.definitions.append(code)


_SCALER_CREATION_EXAMPLES = (
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
""",
        after="""\
import torch

amp_device = "cuda" if torch.cuda.is_available() else "cpu"

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler(amp_device, enabled=amp_device == "cuda")
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast(amp_device):
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        codes=(SCALER_CREATED,), options=Options(plain=True),
    ),
    Example(
        before=MIXED_PRECISION_ALREADY,
        after=None,
        codes=(),
    ),
)


RULE = rule("scaler-creation", (SCALER_CREATED,), _plan,
            examples=_SCALER_CREATION_EXAMPLES)
