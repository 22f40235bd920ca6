"""Create the one grad scaler where every site using it can reach it."""

from __future__ import annotations

from amprewrite.analysis.scaler_home import ScalerHome
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, declare
from amprewrite.rules.context import RuleContext
from amprewrite.transform import Insert

SCALER_CREATED = declare(
    "AMP100", CHANGE, "grad scaler created",
    "One scaler serves every training step it can reach.",
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
    code = f"{home.expression} = {constructor}"
    body = home.block.body
    anchor = body[min(home.index, len(body)) - 1] if home.index > 0 else body[0]
    ctx.notes.append(Note(SCALER_CREATED, anchor,
                          f"grad scaler `{home.expression}` created {_WHERE[home.scope]}"))
    if home.scope == "global" and home.index == header_index:
        return code
    ctx.plan.inserts.append(Insert(home.block, home.index, [ctx.parse_statement(code)]))
    return None
