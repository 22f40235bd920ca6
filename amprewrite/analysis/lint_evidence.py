"""What the protocol checker's own reading of a script says of each AMP mistake the lint
finds in it, by the values the script's scaler can hold at the site on the paths reaching it:
where it is never on (the `if scaler is None:` branch, the FP32 arm of the author's flag) the
site is no mistake and no fix target; where it may be None or unbound on some path, the
mistake is reported and not fixed (the fix would raise there); where it is on on every path,
the fix is safe. A site no path of the checker's reaches is reported with its fix offered as
unsafe (`--unsafe-fixes`)."""

from __future__ import annotations

import ast
import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts
from amprewrite.codegen import locate
from amprewrite.protocol import ir
from amprewrite.protocol.check import Reading, read_program
from amprewrite.protocol.invariants import PLAIN_STEP_OF_SCALED, UNSCALED_INTO_SCALED_STEP

# a fix calling the scaler where it may be these raises on that path
_RAISES = frozenset({ir.NONE, ir.UNBOUND})
_ON = frozenset({ir.ENABLED, ir.UNKNOWN})
T = TypeVar("T")


class Verdict(enum.Enum):
    FIX = "fix"  # seen, and safe to fix
    REPORT = "report"  # seen, but the scaler may be None or off there: reported, not fixed
    UNSAFE = "unsafe"  # no path of the checker's reaches it: the fix only with --unsafe-fixes
    DROP = "drop"  # seen, and not a mistake on any path
    FP32_PATH = "fp32 path"  # seen only where the scaler is None or off: the author's FP32 path


@dataclass
class Evidence:
    """The checker's reading of one script, for its scaler `scaler`."""

    reading: Reading
    starts: dict[cst.CSTNode, tuple[int, int]]
    scaler: str

    @classmethod
    def of(cls, facts: ModuleFacts, scaler: str, nodes: Iterable[cst.CSTNode]) -> Evidence:
        code = facts.code
        return cls(read_program(ast.parse(code), code), locate(facts.module, list(nodes)).starts,
                   scaler)

    def _where(self, node: cst.CSTNode) -> tuple[int, int]:
        line, column = self.starts[node]
        return line, column

    def site(self, node: cst.CSTNode) -> Verdict:
        """The verdict for a fix at `node` (a backward, a step, a save)."""
        return self._judge(self._where(node))

    def _judge(self, where: tuple[int, int]) -> Verdict:
        observed = self.reading.observed.get(where)
        if observed is None:
            return Verdict.UNSAFE
        values = observed.get(self.scaler, frozenset({ir.UNKNOWN}))
        if not values & _ON:
            return Verdict.FP32_PATH
        return Verdict.REPORT if values & _RAISES else Verdict.FIX

    def plain_step(self, call: cst.CSTNode) -> Verdict:
        """`optimizer.step()` in a function that steps nothing through the scaler: a mistake
        only where it applies scaled gradients (the textbook `scaler.scale(loss).backward();
        optimizer.step()`), not where it steps an FP32 model's."""
        where = self._where(call)
        if any(v.code.id == PLAIN_STEP_OF_SCALED.id and (v.line, v.col) == where
               for v in self.reading.violations):
            return self._judge(where)
        verdict = self._judge(where)  # no step the checker saw (a scheduler's), or none with
        return verdict if verdict is Verdict.FP32_PATH else Verdict.DROP  # scaled gradients

    def feeding_backward(self, call: cst.CSTNode) -> Verdict:
        """An unscaled backward in a function that steps nothing through the scaler: a
        mistake only where its gradients reach a step that applies scaled ones too."""
        where = self._where(call)
        verdict = self._judge(where)
        if verdict in (Verdict.UNSAFE, Verdict.FP32_PATH) or any(
                where in v.sources for v in self.reading.violations
                if v.code.id in (PLAIN_STEP_OF_SCALED.id, UNSCALED_INTO_SCALED_STEP.id)):
            return verdict
        return Verdict.DROP

    def missing_unscale(self, statement: cst.CSTNode) -> Verdict:
        """Gradients clipped on the line of `statement`."""
        line, _ = self._where(statement)
        uses = [where for where in self.reading.observed if where[0] == line]
        return self._judge(uses[0]) if uses else Verdict.UNSAFE


def consistent(
    evidence: Evidence, backwards: dict[cst.CSTNode, Verdict], steps: dict[cst.CSTNode, Verdict]
) -> None:
    """The verdicts of unscaled backwards and plain steps made consistent over what feeds
    what on the checker's paths (in place): a step routed through the scaler needs every
    unscaled backward it applies scaled, and a scaled backward every plain step it feeds
    routed. A candidate another one needs is fixed too where the scaler is on there; where it
    cannot be, neither is the one that needs it (reported, not fixed)."""
    at = {evidence._where(node): node for node in [*backwards, *steps]}
    feeds: dict[tuple[int, int], set[tuple[int, int]]] = {}
    for step, feeders in evidence.reading.fed.items():
        if step in evidence.reading.plain_steps:
            for feeder in feeders:
                feeds.setdefault(feeder, set()).add(step)
    fixed = {node for verdicts in (backwards, steps) for node, v in verdicts.items()
             if v is Verdict.FIX}
    blocked: set[cst.CSTNode] = set()

    def needs(node: cst.CSTNode, where: tuple[int, int]) -> bool:
        """Fix what `node`'s fix needs at `where`: whether that can be done."""
        other = at.get(where)
        if other is None or other in blocked or evidence.site(other) is not Verdict.FIX:
            return False
        fixed.add(other)
        return True

    changed = True
    while changed:
        changed = False
        for node in list(fixed):
            where = evidence._where(node)
            needed = evidence.reading.fed.get(where, set()) if node in steps else feeds.get(
                where, set())
            if not all(needs(node, other) for other in needed):
                fixed.discard(node)
                blocked.add(node)
                changed = True
    for verdicts in (backwards, steps):
        for node, verdict in verdicts.items():
            if node in fixed:
                verdicts[node] = Verdict.FIX
            elif verdict is Verdict.FIX:
                verdicts[node] = Verdict.REPORT


def split(
    items: Iterable[T], verdict: Callable[[T], Verdict], fp32: list[T] | None = None
) -> tuple[list[T], list[T], list[T]]:
    """`items` as (safe to fix, to report only, unsafe to fix), those on the author's FP32
    path into `fp32`; the dropped left out."""
    safe: list[T] = []
    report: list[T] = []
    unsafe: list[T] = []
    for item in items:
        judged = verdict(item)
        if judged is Verdict.FIX:
            safe.append(item)
        elif judged is Verdict.REPORT:
            report.append(item)
        elif judged is Verdict.UNSAFE:
            unsafe.append(item)
        elif judged is Verdict.FP32_PATH and fp32 is not None:
            fp32.append(item)
    return safe, report, unsafe
