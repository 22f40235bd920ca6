"""The codemod for one source: parse -> analyse -> plan -> transform -> render -> check."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from amprewrite.analysis.checkpoints import analyse_checkpoints
from amprewrite.analysis.evaluation import analyse_evaluation
from amprewrite.analysis.existing_amp import existing_amp
from amprewrite.analysis.facts import collect
from amprewrite.analysis.kinds import KindTable
from amprewrite.analysis.training_step import Note, analyse_training
from amprewrite.findings import Finding
from amprewrite.options import Options
from amprewrite.rules.o1 import plan_o1
from amprewrite.transform import apply_edits


@dataclass
class RewriteResult:
    source: bytes  # the new source; identical bytes when nothing changed
    findings: list[Finding] = field(default_factory=list)
    changed: bool = False


class RewriteError(Exception):
    """The source could not be rewritten; `finding` says why (AMP003 or AMP004)."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.message)
        self.finding = finding


def rewrite_source(source: bytes, options: Options) -> RewriteResult:
    """Rewrite one Python source (bytes, any PEP 263 encoding) for `options`."""
    module = _parse(source)
    facts = collect(module)
    amp = existing_amp(facts)
    if amp is not None:
        return _unchanged(source, [Finding("AMP002", 1, 1,
                                           f"file already uses mixed precision (`{amp}`); "
                                           "left unchanged")])
    kinds = KindTable(facts)
    training = analyse_training(facts, kinds)
    evaluation = analyse_evaluation(facts, kinds, training.regions)
    if options.opt_level == "O0" or not (training.found or evaluation):
        notes = [] if options.opt_level == "O0" else training.notes
        findings = _locate(module, notes)
        if options.opt_level == "O0":
            message = "opt level O0 is FP32 training: nothing to change"
        elif findings:
            message = "nothing amprewrite can rewrite safely; file left unchanged (see above)"
        else:
            message = "no training step or evaluation forward pass found; file left unchanged"
        return _unchanged(source, [*findings, Finding("AMP001", 1, 1, message)])
    checkpoints = analyse_checkpoints(facts, kinds)
    ctx = plan_o1(facts, training, evaluation, checkpoints, options)
    new_module = apply_edits(module, ctx.plan)
    new_source = new_module.bytes
    _check_parses(new_source)
    findings = _locate(module, [*training.notes, *ctx.notes])
    return RewriteResult(new_source, findings, new_source != source)


def _parse(source: bytes) -> cst.Module:
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        message = f"cannot parse: {exc.message}"
        raise RewriteError(Finding("AMP003", exc.raw_line, exc.raw_column + 1, message)) from exc
    except (UnicodeDecodeError, LookupError, SyntaxError) as exc:
        raise RewriteError(Finding("AMP004", 1, 1, f"cannot decode source: {exc}")) from exc


def _check_parses(source: bytes) -> None:
    try:
        cst.parse_module(source)
    except cst.ParserSyntaxError as exc:  # a bug in a rule: never write such a file
        raise RewriteError(Finding("AMP004", 1, 1, f"internal error: the rewrite does not parse "
                                   f"({exc.message}); file left unchanged")) from exc


def _unchanged(source: bytes, findings: list[Finding]) -> RewriteResult:
    return RewriteResult(source, findings, False)


def _locate(module: cst.Module, notes: list[Note]) -> list[Finding]:
    """Turn notes on original nodes into findings with 1-based line and column."""
    if not notes:
        return []
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    findings = []
    for note in notes:
        start = positions[note.node].start
        findings.append(Finding(note.code, start.line, start.column + 1, note.message))
    return sorted(findings, key=lambda f: (f.line, f.col, f.code))
