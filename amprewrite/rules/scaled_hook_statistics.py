"""A file whose backward hooks keep gradient statistics is left as written unless the
rewrite is for bfloat16, which scales no loss."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amprewrite.analysis.training_step import Note
from amprewrite.catalog import SKIP, declare
from amprewrite.options import Options
from amprewrite.rules.context import RuleContext
from amprewrite.rules.registry import Example, rule

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis

SCALED_HOOK_STATISTICS = declare(
    "AMP137", SKIP, "backward hook keeps gradient statistics the loss scale multiplies",
    "A backward hook stores the gradients it sees (a second-order optimizer's statistics, "
    "KFAC's covariances): under float16 they are the scaled loss's, multiplied by the loss "
    "scale (its square for a covariance), and the optimizer built on them silently stops "
    "learning. The file is left as written; rewrite it with `--dtype bfloat16` (no loss "
    "scaling), or divide the statistics by `scaler.get_scale()` in the hook by hand.",
    why=(
        "A backward hook keeps the gradients it sees, which float16's loss scaling "
        "multiplies by the scale."
    ),
    example=(
        "layer.register_full_backward_hook(self._save_grad_output)\n"
        "# def _save_grad_output(self, module, grad_in, grad_out):\n"
        "#     self.g[module] = grad_out[0].t() @ grad_out[0]"
    ),
)


def applies(analysis: ModuleAnalysis, options: Options) -> bool:
    """A training file with such hooks, rewritten for a dtype that may be float16."""
    return (options.opt_level != "O0" and options.autocast_dtype != "bfloat16"
            and analysis.training.found and bool(analysis.scaled_statistics))


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    for registration in analysis.scaled_statistics:
        hook = ctx.facts.module.code_for_node(registration.args[0].value)
        ctx.notes.append(Note(SCALED_HOOK_STATISTICS, registration, (
            f"backward hook `{hook}` keeps gradients that float16's loss scale multiplies; "
            "file left unchanged (rewrite with `--dtype bfloat16`, which scales no loss, or "
            "divide them by `scaler.get_scale()` in the hook)")))


_KEPT = """\
import torch


class Preconditioner:
    def __init__(self, model):
        self.g = {}
        for layer in model.modules():
            layer.register_full_backward_hook(self._save_grad_output)

    def _save_grad_output(self, module, grad_input, grad_output):
        self.g[module] = grad_output[0].t() @ grad_output[0]


model = torch.nn.Linear(4, 2)
preconditioner = Preconditioner(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
"""

_PRINTED_ONLY = """\
import torch


def show(module, grad_input, grad_output):
    print(grad_output[0].norm())


model = torch.nn.Linear(4, 2)
model.register_full_backward_hook(show)
"""

RULE = rule("scaled-hook-statistics", (SCALED_HOOK_STATISTICS,), _plan, examples=(
    Example(before=_KEPT, after=None, codes=(SCALED_HOOK_STATISTICS,)),
    Example(before=_PRINTED_ONLY, after=None, codes=()),  # keeps nothing, trains nothing
))
