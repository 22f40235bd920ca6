"""The codemod for one source: parse -> analyse -> plan -> transform -> render -> check ->
fit the lines the change lengthened."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import libcst as cst

from amprewrite.analysis import ModuleAnalysis, analyse
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import CHANGE, SKIP, declare
from amprewrite.codegen import Layout, locate, render_module
from amprewrite.findings import (
    ALREADY_MIXED_PRECISION,
    CANNOT_PARSE,
    CANNOT_PROCESS,
    NOTHING_TO_DO,
    Finding,
)
from amprewrite.ledger import account
from amprewrite.line_fitting import line_fitter, line_joiner
from amprewrite.line_map import line_map
from amprewrite.options import Options, validate
from amprewrite.recipes import choose
from amprewrite.rules.context import RuleContext
from amprewrite.rules.migrate_apex import migration_refused
from amprewrite.steering import WITHHELD, Steering, Withheld, steer, steering
from amprewrite.suppressions import LineCodes, line_codes
from amprewrite.transform import Plan, apply_edits
from amprewrite.verification import EditSite, edit_sites, statements_to_locate, verify

# The text pre-filter: a file that mentions none of these words cannot hold a training step
# amprewrite would rewrite (or AMP it wrote, for O0 to take out), so it is reported AMP001
# without being parsed. Each is a regular expression. A recipe for a library whose training
# setup a file may configure without naming torch or `backward` (Hugging Face Trainer and TRL
# configs, DeepSpeed, FSDP) must have its names here, or its files are never analysed.
TRAINING_WORDS = (
    "torch", "backward", "lightning", "accelerate", "apex", "determined", "enchanter", r"\bray\b",
    "amprewrite_runtime", "transformers", r"\btrl\b", "deepspeed", "fully_shard",
    "FullyShardedDataParallel",
)
MAY_TRAIN = re.compile("|".join(TRAINING_WORDS).encode())


@dataclass
class RewriteResult:
    """The rewritten source of one file and its findings."""

    source: bytes  # the new source; identical bytes when nothing changed
    findings: list[Finding] = field(default_factory=list)
    changed: bool = False
    own_amp: bool = False  # the author's or a framework's precision is kept (`owns_precision`)
    withheld: str | None = None  # why edits were withheld (`steering.Withheld.reason`)


class RewriteError(Exception):
    """The source could not be rewritten; `finding` says why (AMP003 or AMP004)."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.message)
        self.finding = finding


# Larger sources are left alone (libcst takes several hundred bytes of memory per byte).
MAX_SOURCE_BYTES = 5 * 1024 * 1024

TOO_LARGE = declare(
    "AMP008", SKIP, "file too large to rewrite",
    "A source over 5 MB (`engine.MAX_SOURCE_BYTES`; a notebook's code cells together) is "
    "left unchanged: parsing it would take gigabytes of memory. Such a file is generated "
    "rather than a training script: exclude it.",
    why="The source (a notebook's code cells together) is larger than 5 MB.",
    example=(
        "# a generated file of 6 MB (weights written as a Python literal)\n"
        "WEIGHTS = [0.1, 0.2, ...]"
    ),
)


def too_large(size: int) -> Finding:
    """The finding for a source of `size` bytes, over MAX_SOURCE_BYTES."""
    return Finding(TOO_LARGE, 1, 1, f"a source of {size / 2**20:.1f} MB is over the "
                   f"{MAX_SOURCE_BYTES / 2**20:.0f} MB limit; {_LEFT_UNCHANGED}")


def rewrite_source(source: bytes, options: Options) -> RewriteResult:
    """Rewrite one Python source (bytes, any PEP 263 encoding) for `options`; every site of
    its ledger accounted for (`ledger`)."""
    try:
        result, tree = _rewrite(source, options)
    except RecursionError as exc:  # libcst walks recursively: a pathologically deep file
        raise RewriteError(_too_deep()) from exc
    return accounted(source, result, options, tree)


def accounted(
    source: bytes, result: RewriteResult, options: Options, tree: ast.Module | None = None
) -> RewriteResult:
    """`result` with a generic finding at each site of the source's ledger it leaves silent
    (not at O0, whose goal is FP32: a site left FP32 there is what was asked); `tree` is the
    source's `ast` parse where the caller has one."""
    if options.opt_level == "O0" or any(f.code == TOO_LARGE for f in result.findings):
        return result
    if result.own_amp:
        return result  # the author's or a framework's precision: the lint checked its sites
    extra = account(source, result.source, result.findings, tree)
    if not extra:
        return result
    findings = list(result.findings)
    cut = len(findings)  # the file-level findings (at 1:1) that end the list stay last
    while cut and (findings[cut - 1].line, findings[cut - 1].col) == (1, 1):
        cut -= 1
    lines = sorted([*findings[:cut], *extra], key=lambda f: (f.line, f.col, f.code))
    return RewriteResult(result.source, [*lines, *findings[cut:]], result.changed,
                         result.own_amp, result.withheld)


def _too_deep() -> Finding:
    return Finding(CANNOT_PROCESS, 1, 1, "source too deeply nested to analyse; file left "
                   "unchanged")


def _rewrite(source: bytes, options: Options) -> tuple[RewriteResult, ast.Module | None]:
    """The result, and the source's `ast` tree where it was parsed."""
    problem = validate(options)
    if problem is not None:
        raise ValueError(problem)
    if len(source) > MAX_SOURCE_BYTES:
        return RewriteResult(source, [too_large(len(source))]), None
    _check_decodes(source)
    if not MAY_TRAIN.search(source):  # most files of a repository: no need to parse them
        message = "no torch, backward or training framework in this file; skipped"
        return RewriteResult(source, [Finding(NOTHING_TO_DO, 1, 1, message)]), None
    tree = _check_input_compiles(source)
    return _run(_cst_parse(source), source, options, None, tree), tree


def _run(
    module: cst.Module, source: bytes, options: Options, carried: tuple[str, ...] | None,
    tree: ast.Module | None = None, comments: LineCodes | None = None,
) -> RewriteResult:
    """Analyse `module` (parsed from, or rendered as, `source`; its `ast` tree, where there is
    one), run the recipe that applies, and carry out its plan; `carried` is the scaler
    arguments a migration found, `comments` the suppressions of the text it migrated."""
    return rewrite_analysed(analysis=analyse(module, scaler_arguments=carried, source=source),
                            source=source, options=options, tree=tree, comments=comments)


def rewrite_analysed(
    analysis: ModuleAnalysis, source: bytes, options: Options, tree: ast.Module | None = None,
    comments: LineCodes | None = None,
) -> RewriteResult:
    """Run the recipe that applies to an analysed module (parsed from `source`, and as `tree`
    by CPython where the caller has that) and carry out its plan: a project's modules come
    here with their links. `comments`: the suppression comments by line, where they are not
    `source`'s own (a migration's result: the comments of the lines it replaced)."""
    module = analysis.facts.module
    recipe = choose(analysis, options)
    ctx = recipe.context(analysis, options)
    chosen = steering(options, source, comments)
    for rule in recipe.rules:
        with nullcontext() if chosen is None else chosen.rule(ctx):
            rule.plan(ctx, analysis)
    if recipe.finish is not None:
        recipe.finish(ctx, analysis)
    if recipe.rewrites_result is not None and recipe.rewrites_result(options):
        return _then_rewrite(module, source, ctx, options, recipe.result_goes_fp32, tree,
                             chosen)
    result = _apply(module, source, ctx, tree, chosen)
    result.own_amp = recipe.owns_precision
    return result


def _then_rewrite(
    module: cst.Module, source: bytes, ctx: RuleContext, options: Options,
    goes_fp32: bool = False, tree: ast.Module | None = None, chosen: Steering | None = None,
) -> RewriteResult:
    """A migration's plan carried out on the tree, whose result the rewrite (or the lint)
    then analyses as it is, without parsing its text again; every finding on a line of the
    original `source`. A migration whose result is plain FP32 (`goes_fp32`: apex taken out)
    is kept only where the rewrite then takes that result into mixed precision: where the
    file's precision stays its author's (a torch scaler of theirs beside the apex code, so the
    lint, not the rewrite, reads the result), apex would be gone with nothing in its place,
    and the file is left as written (AMP413)."""
    layout, sites, withheld = _laid_out(module, ctx, chosen)
    if withheld is not None and not ctx.plan:
        return _nothing_made(module, source, ctx, withheld)
    rendered: list[tuple[Plan, cst.Module]] = []

    def render(plan: Plan) -> tuple[bytes, ast.Module | None]:
        rendered.append((plan, apply_edits(module, plan, ctx.facts.statements_around)))
        return render_module(rendered[-1][1], module, layout, source), None

    checked = verify(source, module, ctx.plan, ctx.notes, ctx.facts, sites, layout, render, tree,
                     _reason(withheld))
    text = checked.source
    first = [*_findings(layout, checked.notes), *_held(withheld), *checked.rejections,
             *ctx.file_findings]
    if checked.rejections:  # what the migration kept is the result: no second phase
        findings = first
        findings.sort(key=lambda f: (f.line, f.col, f.code))
        return RewriteResult(_fitted(text, source, module, ctx.line_limit, options), findings,
                             text != source, withheld=_reason(withheld))
    migrated = rendered[-1][1] if rendered[-1][0] is checked.plan else module
    to_original = line_map(text, source)
    second = _run(migrated, text, ctx.next_options or options, ctx.scaler_arguments,
                  comments=_traced(line_codes(source), text, to_original))
    if goes_fp32 and second.own_amp:
        refused = [*_locate(module, migration_refused(ctx)), *ctx.file_findings]
        return RewriteResult(source, refused, False, True)
    if goes_fp32 and second.withheld is not None:  # apex out, its native AMP not all made
        return RewriteResult(source, [Finding(WITHHELD, 1, 1, (
            f"edits withheld: once {second.withheld}, the native mixed precision replacing "
            "apex's would not be complete; apex is kept as written"))],
            withheld=second.withheld)
    if second.source == text != source:  # the second phase compiled what it changed itself
        _check_compiles(text)
    findings = first + [
        Finding(f.code, to_original(f.line), f.col, f.message)
        for f in second.findings if f.code not in (NOTHING_TO_DO, ALREADY_MIXED_PRECISION)
    ]
    findings.sort(key=lambda f: (f.line, f.col, f.code))
    return RewriteResult(_fitted(second.source, source, module, ctx.line_limit,
                                 ctx.next_options or options),
                         findings, second.source != source, second.own_amp,
                         _reason(withheld) or second.withheld)


def _apply(
    module: cst.Module, source: bytes, ctx: RuleContext, tree: ast.Module | None = None,
    chosen: Steering | None = None,
) -> RewriteResult:
    """Carry out the plan (less what the user's selection withholds, `steering`), render the
    result, verify it (`verification`: what breaks the protocol is undone), and report the
    notes as findings."""
    if not ctx.plan:  # nothing to render: only the findings' positions are needed
        return RewriteResult(source, [*_locate(module, ctx.notes), *ctx.file_findings])
    layout, sites, withheld = _laid_out(module, ctx, chosen)
    if withheld is not None and not ctx.plan:
        return _nothing_made(module, source, ctx, withheld)

    def render(plan: Plan) -> tuple[bytes, ast.Module | None]:
        new_module = apply_edits(module, plan, ctx.facts.statements_around)
        new_source = render_module(new_module, module, layout, source)
        return new_source, _check_compiles(new_source) if new_source != source else None

    checked = verify(source, module, ctx.plan, ctx.notes, ctx.facts, sites, layout, render, tree,
                     _reason(withheld))
    findings = [*_findings(layout, checked.notes), *_held(withheld), *checked.rejections,
                *ctx.file_findings]
    findings.sort(key=lambda f: (f.line, f.col, f.code))
    return RewriteResult(_fitted(checked.source, source, module, ctx.line_limit, ctx.options),
                         findings, checked.source != source, withheld=_reason(withheld))


def _fitted(output: bytes, source: bytes, module: cst.Module, limit: int,
            options: Options) -> bytes:
    """The verified output with the lines the rewrite took past `limit` columns wrapped, or
    at O0 the statements it changed joined where they fit (`line_fitting`: the layout
    changes, the program's `ast` does not)."""
    if output == source:
        return output
    text = output.decode(module.encoding)
    original = source.decode(module.encoding)
    fit = line_joiner(original, limit) if options.opt_level == "O0" else line_fitter(
        original, limit, module.default_indent)
    try:
        fitted = fit(text)
    except Exception:  # a layout step: its failure must not cost the rewrite
        return output
    return output if fitted == text else fitted.encode(module.encoding)


def _laid_out(
    module: cst.Module, ctx: RuleContext, chosen: Steering | None
) -> tuple[Layout, list[EditSite], Withheld | None]:
    """Where the notes and the edited statements are, the plan's edit sites once the user's
    selection has withheld its edits (taken out of `ctx.plan`), and what it withheld."""
    sites = edit_sites(ctx.plan, ctx.facts)
    layout = locate(module, [*(note.node for note in ctx.notes), *statements_to_locate(sites)])
    withheld = None if chosen is None else steer(ctx, chosen, layout)
    if withheld is not None:
        sites = edit_sites(ctx.plan, ctx.facts)
        ctx.notes = [note for note in ctx.notes if id(note) not in withheld.notes]
    return layout, sites, withheld


def _nothing_made(
    module: cst.Module, source: bytes, ctx: RuleContext, withheld: Withheld
) -> RewriteResult:
    """Every edit withheld: the file as it was, with the notes of what was not made."""
    findings = [*_locate(module, [n for n in ctx.notes if n.code.severity is not CHANGE]),
                *withheld.findings, *ctx.file_findings]
    findings.sort(key=lambda f: (f.line, f.col, f.code))
    return RewriteResult(source, findings, withheld=withheld.reason)


def _traced(comments: LineCodes, text: bytes, to_original: Callable[[int], int]) -> LineCodes:
    """The suppression comments of an original, at the lines of `text` traced to theirs."""
    if not comments:
        return {}
    traced = ((line, to_original(line)) for line in range(1, text.count(b"\n") + 2))
    return {line: comments[original] for line, original in traced if original in comments}


def _held(withheld: Withheld | None) -> list[Finding]:
    return [] if withheld is None else withheld.findings


def _reason(withheld: Withheld | None) -> str | None:
    return None if withheld is None else withheld.reason


def _check_decodes(source: bytes) -> None:
    """Binary or undecodable files fail clearly, before the cheap pre-filter skips them."""
    if b"\x00" in source:
        raise RewriteError(Finding(CANNOT_PROCESS, 1, 1,
                                   "binary file (contains NUL bytes); skipped"))
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
        source.decode(encoding)
    except (UnicodeDecodeError, LookupError, SyntaxError) as exc:
        raise RewriteError(Finding(CANNOT_PROCESS, 1, 1, _UNDECODABLE)) from exc


_UNDECODABLE = ("cannot decode: not UTF-8 and no valid `# -*- coding: ... -*-` declaration; "
                "file left unchanged")


def parse(source: bytes) -> cst.Module:
    """Parse `source` (after checking it decodes), or raise RewriteError (AMP003/AMP004)."""
    _check_decodes(source)
    _check_input_compiles(source)
    return _cst_parse(source)


def _cst_parse(source: bytes) -> cst.Module:
    """libcst's parse of a source CPython has compiled."""
    try:
        with _unvalidated():
            return cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        raise RewriteError(_syntax_error(exc)) from exc
    except (UnicodeDecodeError, LookupError, SyntaxError) as exc:
        raise RewriteError(Finding(CANNOT_PROCESS, 1, 1, _UNDECODABLE)) from exc


@contextmanager
def _unvalidated() -> Iterator[None]:
    """libcst validates every node it builds (`CSTNode.__post_init__`): a fifth of a parse.
    The nodes its parser builds from source CPython has just compiled are valid by
    construction (libcst's own comment there says validation belongs elsewhere), so the parse
    skips it; nodes the rules build are validated as ever. Runs never share a process's nodes
    across threads (files go to processes), so the switch is this parse's alone."""
    validate = cst.CSTNode.__post_init__
    cst.CSTNode.__post_init__ = _valid  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        cst.CSTNode.__post_init__ = validate  # type: ignore[method-assign]


def _valid(node: cst.CSTNode) -> None:
    """A parsed node: nothing to check."""


def _syntax_error(exc: cst.ParserSyntaxError) -> Finding:
    """AMP003 where libcst cannot parse what CPython compiles, at libcst's position."""
    where = re.search(r"error at (\d+):(\d+)", exc.message)
    line, col = (int(where[1]), int(where[2]) + 1) if where else (exc.editor_line, 1)
    return Finding(CANNOT_PARSE, line, col, "cannot parse (this Python syntax is not supported "
                   f"by libcst); {_LEFT_UNCHANGED}")


_LEFT_UNCHANGED = "file left unchanged"


def _check_input_compiles(source: bytes) -> ast.Module | None:
    """CPython parses and compiles the input before libcst parses it; its `ast` tree serves
    the ledger (None where CPython's parser cannot build one). What it refuses is the user's
    error, AMP003 at CPython's line and column with its message (as black reports it), also
    where its parser accepts what its compiler refuses (`return` at module level,
    `def f(a, a)`, a repeated keyword); an expression too deep for it (a sum of thousands of
    terms, which libcst's parser would take minutes over) is refused at once."""
    import warnings

    try:
        with warnings.catch_warnings():  # e.g. SyntaxWarning: invalid escape sequence
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
            compile(tree, "<source>", "exec", dont_inherit=True)
    except SyntaxError as refused:
        verb = "compile" if _parses(source) else "parse"
        raise RewriteError(Finding(CANNOT_PARSE, refused.lineno or 1, refused.offset or 1,
                                   f"cannot {verb}: {refused.msg}; {_LEFT_UNCHANGED}")
                           ) from refused
    except (RecursionError, MemoryError) as exc:  # MemoryError: CPython's parser stack
        raise RewriteError(_too_deep()) from exc
    except ValueError:
        return None  # libcst's parse reports it
    return tree


def _parses(source: bytes) -> bool:
    """Whether CPython's parser accepts `source` (its compiler may still refuse it)."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, "<source>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def _check_compiles(source: bytes) -> ast.Module:
    """Compile the output: a bug in a rule must never reach the file. CPython's own parser
    and compiler are the authority (and catch what the grammar allows but Python refuses,
    like a repeated keyword); a second libcst parse would only cost time. Its `ast` tree is
    what the verification reads."""
    import warnings

    try:
        with warnings.catch_warnings():  # `x is 1` in the user's code: not amprewrite's to say
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
            compile(tree, "<amprewrite output>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        if exc.msg == "too many statically nested blocks":
            raise RewriteError(Finding(CANNOT_PROCESS, 1, 1, "the rewrite would nest blocks "
                                       "deeper than Python allows (20: a `with autocast()` in "
                                       f"20 loops); {_LEFT_UNCHANGED}")) from exc
        raise RewriteError(_internal(exc)) from exc
    except ValueError as exc:
        raise RewriteError(_internal(exc)) from exc
    return tree


def _internal(exc: Exception) -> Finding:
    return Finding(CANNOT_PROCESS, 1, 1, f"internal error: the rewrite does not compile "
                   f"({exc}); {_LEFT_UNCHANGED}")


def _locate(module: cst.Module, notes: list[Note]) -> list[Finding]:
    """Findings for notes on nodes of `module`, which is not rewritten."""
    return _findings(locate(module, [note.node for note in notes]), notes) if notes else []


def _findings(layout: Layout, notes: list[Note]) -> list[Finding]:
    """Notes on original nodes as findings with 1-based line and column, in source order."""
    findings = []
    for note in notes:
        line, column = layout.starts[note.node]
        findings.append(Finding(note.code, line, column + 1, note.message))
    return sorted(findings, key=lambda f: (f.line, f.col, f.code))
