"""LR scheduler steps that follow an optimizer step in the same iteration.

When the scaler skips an optimizer step (inf/NaN gradients), such a scheduler must not run
ahead of the optimizer (and must not warn "lr_scheduler.step() before optimizer.step()",
pytorch issue 55585), so the rewrite guards it with the scaler's skipped-step flag.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.kinds import Kind, KindTable
from amprewrite.analysis.sites import StepSite, call_sites
from amprewrite.analysis.training_step import same_iteration


@dataclass(frozen=True)
class GuardedScheduler:
    """An LR scheduler stepped right after an optimizer step the scaler may skip."""

    site: StepSite  # `scheduler.step()`, alone on its line
    after: StepSite  # the optimizer step it follows
    after_update: bool = True  # `scaler.update()` goes right after that step, before this


def schedulers_after_steps(
    facts: ModuleFacts, kinds: KindTable, updates_after: list[StepSite], steps: list[StepSite]
) -> list[GuardedScheduler]:
    """Schedulers stepped after an optimizer step of their iteration; `after_update` when
    `update()` sits right after that step (else it comes later: a loop over optimizers)."""
    guarded = []
    for site in call_sites(facts, kinds).steps:
        if site.with_arguments or site.kind is not Kind.SCHEDULER:
            continue
        line = site.statement
        if not (isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1):
            continue
        for candidates, after_update in ((updates_after, True), (steps, False)):
            preceding = [
                step for step in candidates
                if facts.order[step.statement] < facts.order[line]
                and same_iteration(step, site, facts)
            ]
            if preceding:
                guarded.append(GuardedScheduler(site, preceding[-1], after_update))
                break
    return guarded
