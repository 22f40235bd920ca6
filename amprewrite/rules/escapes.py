"""Cast low-precision values back to float32 where they leave autocast for a float32 use."""

from __future__ import annotations

from amprewrite.analysis.escapes import Escapes
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, SKIP, declare
from amprewrite.rules.context import RuleContext
from amprewrite.rules.expressions import as_float
from amprewrite.transform import Replace

CAST_AFTER_AUTOCAST = declare(
    "AMP112", CHANGE, "low-precision value cast back to float32 after autocast",
    "A tensor computed under autocast reaches code that needs float32 (`.numpy()`, numpy, a "
    "float32 model or matmul, a loss, an index assignment): `.float()` is added at that use.",
)

ESCAPE_NOT_CASTABLE = declare(
    "AMP133", SKIP, "low-precision values cannot be cast where they are used",
    "A container or starred argument carries autocast outputs to a float32 use: autocast is left "
    "out of the file. Cast with `.float()` where the tensors are produced and run again.",
)


def cast_escapes(ctx: RuleContext, escapes: Escapes) -> None:
    """Cast each escaping value at its use; when one cannot be cast at one place, the
    autocast regions are left out (the caller skips them) and the use is reported."""
    code_for = ctx.facts.module.code_for_node
    for stuck in escapes.stuck:
        ctx.notes.append(Note(ESCAPE_NOT_CASTABLE, stuck.node,
                              f"`{_short(code_for(stuck.node))}` would "
                              f"hold low-precision tensors from autocast and reach {stuck.what}; "
                              "autocast left out of this file (cast them with `.float()` where "
                              "they are produced, then run again)"))
    if escapes.stuck:
        return
    for escape in escapes.casts:
        ctx.plan.replaces.append(Replace(escape.node, as_float))
        ctx.notes.append(Note(CAST_AFTER_AUTOCAST, escape.node,
                              f"`{_short(code_for(escape.node))}` is "
                              f"low precision after autocast: cast to float32 for {escape.use}"))


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."
