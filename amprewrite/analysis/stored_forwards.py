"""Training regions that hold no forward pass: the loss is built from outputs a model computed
elsewhere and stored (`self.data.append((r, prob[a]))`, read back in `train_net()`). Autocast
around the loss arithmetic changes little there; the model's forward stays FP32 unless it is
wrapped where it runs. Reported, so that a file called rewritten does not stay FP32 silently."""

from __future__ import annotations

from amprewrite.analysis.facts import ModuleFacts, body
from amprewrite.analysis.kinds import KindTable
from amprewrite.analysis.statements import calls_in
from amprewrite.analysis.summaries import summaries_of
from amprewrite.analysis.training_step import Note, Region
from amprewrite.catalog import SKIP, declare

FORWARD_RUNS_ELSEWHERE = declare(
    "AMP209", SKIP, "forward pass stored elsewhere stays FP32",
    "The loss is built from model outputs stored by other code (a rollout's `put_data`, a list "
    "filled elsewhere) that amprewrite cannot follow: the loss is scaled, but the model's "
    "forward runs in FP32. Wrap that forward in `autocast()` where it runs.",
    why="The loss comes from model outputs stored by code the analysis cannot follow.",
    example=(
        "agent.put_data(model(state))\n"
        "loss = agent.loss()   # built from what put_data stored"
    ),
)


def forwards_elsewhere(
    regions: list[Region], producers: list[Region], facts: ModuleFacts, kinds: KindTable
) -> list[Note]:
    """A note on each training region whose calls are all torch's own (the loss arithmetic),
    in a function that runs no forward pass, itself or through the functions it calls, when
    no region was placed where stored outputs are computed (`producers`)."""
    if not regions or producers:
        return []
    summaries = summaries_of(facts, kinds)
    notes = []
    for region in regions:
        function = facts.statements[body(region.block)[region.start]].function
        if function is not None and not summaries.functions[function].forward \
                and _torch_only(region, facts):
            notes.append(Note(FORWARD_RUNS_ELSEWHERE, region.block.body[region.start],
                              "no forward pass runs here: the loss reads model outputs stored "
                              "elsewhere, whose forward stays FP32; wrap it in `autocast()` "
                              "where it runs"))
    return notes


def _torch_only(region: Region, facts: ModuleFacts) -> bool:
    """Every call in the region is a function of torch (`torch.log(prob)`), not a model's,
    a method of an object or a helper that could run one."""
    return all((facts.imports.resolve(call.func) or "").startswith("torch.")
               for statement in region.statements for call in calls_in(statement))
