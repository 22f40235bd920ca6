"""Evaluation code of a project whose training runs the author's own mixed precision: left
as written, each region that would have been wrapped in `autocast` reported."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amprewrite.analysis.facts import body
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import SKIP, declare
from amprewrite.options import Options
from amprewrite.rules.context import RuleContext
from amprewrite.rules.registry import Example, rule
from amprewrite.rules.shared_examples import MIXED_PRECISION_ALREADY

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis

PROJECT_TRAINS_WITH_OWN_AMP = declare(
    "AMP613", SKIP, "evaluation code of a project that trains with its own AMP, kept",
    "Another module of the project (named in the message) trains with the author's own "
    "mixed precision, which the rewrite keeps: this module's evaluation code gets no "
    "autocast of amprewrite's either, and runs as written. Wrap it in the training's "
    "autocast by hand to evaluate in low precision too.",
    why=(
        "A module without a training step of its own is rewritten in the same run as a "
        "project module whose training uses the author's AMP."
    ),
)


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    owner = ctx.options.project_amp
    for region in analysis.evaluation_regions.regions:
        ctx.notes.append(Note(PROJECT_TRAINS_WITH_OWN_AMP, body(region.block)[region.start], (
            f"not wrapped in autocast: `{owner}` trains this project with its own mixed "
            "precision, which is kept; this evaluation code runs as written")))


_EVALUATION = """\
import torch

from model import Net

model = Net()
model.load_state_dict(torch.load("model.pt"))
model.eval()
with torch.no_grad():
    print(model(torch.randn(4, 8)).argmax(1))
"""

_PROJECT_AMP_KEPT_EXAMPLES = (
    Example(before=_EVALUATION, after=None, codes=(PROJECT_TRAINS_WITH_OWN_AMP,),
            options=Options(project_amp="train.py")),
    Example(before=MIXED_PRECISION_ALREADY, after=None, codes=(),
            options=Options(project_amp="train.py")),
)

RULE = rule("project-amp-kept", (PROJECT_TRAINS_WITH_OWN_AMP,), _plan,
            examples=_PROJECT_AMP_KEPT_EXAMPLES, projects=("own_amp_predict",))
