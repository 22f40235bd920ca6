"""The site ledger: a cheap syntactic inventory of every AMP-relevant site of a file, made
without the planner's recognition, and the check that each has a disposition once the file is
rewritten: its line changed, or a finding stands at it. A site with neither gets a generic
finding (AMP011), so that no site the tool could have acted on is silent.

Sites: each `.backward(`; each `.step(` and `.zero_grad(` whose receiver is not plainly
something else (a scheduler, an environment, a call with data for arguments); each autocast,
grad scaler and apex name; each `state_dict()` / `load_state_dict(` of an optimizer-named
receiver; each call of a model-named callable in a function that runs a backward. A
`zero_grad()` is accounted for where a step of the file is. A file whose precision is its
author's or a framework's (the lint, a framework's switch) is checked whole by its recipe: the
engine does not hold it to the ledger.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import re
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass

from amprewrite.catalog import SKIP, Severity, declare
from amprewrite.findings import Finding
from amprewrite.protocol.outline import BLOCK_FIELDS, Interest, subnodes, walk_statements

SITE_WITHOUT_DISPOSITION = declare(
    "AMP011", SKIP, "AMP site left unchanged without a finding of its own",
    "amprewrite saw this site (a backward, an optimizer step, a checkpoint of an optimizer, a "
    "forward pass next to a backward, an AMP name) but found no role for it in a training "
    "step it rewrote or checked, and had nothing more specific to say: check by hand whether "
    "it belongs to a training step that should run in mixed precision.",
    why="A site of the file's syntactic inventory (the ledger, made without the rewrite's "
        "own recognition) has neither a changed line nor a finding at its line.",
    example=(
        "class ScheduledOptim:\n"
        "    def step_and_update_lr(self):\n"
        "        self._optimizer.step()  # a module that never names torch"
    ),
)

# A file that mentions none of these has no site (one regular expression over its text).
_CANDIDATE = re.compile(
    rb"\.backward\(|\.step\(|zero_grad\(|autocast|GradScaler|\bapex\b|state_dict\(|autograd")
_NOT_OPTIMIZER = re.compile(
    r"sched|lr|warmup|env|sim|game|world|ema|swa|averag|progress|pbar|bar|timer|trainer|"
    r"engine|accelerat|fabric|lightning|learner|callback|agent", re.IGNORECASE)
_OPTIMIZER = re.compile(r"optim|(^|_)opts?($|_)", re.IGNORECASE)
_MODEL = re.compile(
    r"model|net|encoder|decoder|generator|discriminator|critic|actor|policy|classifier|"
    r"backbone|head|\b[GD]\b|^[GD]_|_[GD]$", re.IGNORECASE)
_FACTORY = re.compile(r"(make|build|create|get|init|load|new)_", re.IGNORECASE)
_AMP_NAMES = frozenset({"autocast", "GradScaler", "ShardedGradScaler", "scale_loss"})
_AMP_MODULES = ("apex", "torch.cuda.amp", "torch.cpu.amp", "torch.amp", "amprewrite_runtime")
_METHODS = frozenset({"backward", "step", "zero_grad", "state_dict", "load_state_dict"})
_AUTOGRAD = frozenset({"torch.autograd.grad", "autograd.grad", "torch.autograd.backward",
                       "autograd.backward"})
# The words a line holding a site names (a superset: the walk decides)
_SITE_WORDS = re.compile(r"backward|step|zero_grad|autocast|Scaler|apex|amp|scale_loss|"
                         r"state_dict|autograd")
_BACKWARD = re.compile("backward")


@dataclass(frozen=True)
class Site:
    """One entry of the ledger: a 1-based line and 0-based column, what it is, its code."""

    line: int
    col: int
    kind: str  # "backward", "step", "zero_grad", "amp", "checkpoint", "forward"
    text: str
    scope: tuple[int, int] = (0, 0)  # the lines of the function holding it ((0, 0): module)


def inventory(source: bytes, tree: ast.Module | None = None) -> list[Site]:
    """The AMP-relevant sites of a source (none where its text names none); `tree` is its
    `ast` parse where the caller has one."""
    if not _CANDIDATE.search(source):
        return []
    try:
        text = source.decode(tokenize.detect_encoding(io.BytesIO(source).readline)[0])
        tree = tree or ast.parse(source)
    except (SyntaxError, ValueError, LookupError):
        return []
    return sorted(_Inventory(text).sites(tree), key=lambda s: (s.line, s.col))


def _function_spans(sites: list[Site]) -> list[tuple[int, int]]:
    return sorted({site.scope for site in sites if site.scope != (0, 0)})


class _Inventory:
    """The walk: outside the blocks that run a backward (where any call may be a model's
    forward), only the statements whose own lines name a site's word are looked into."""

    def __init__(self, text: str) -> None:
        self.words = Interest(text, (), _SITE_WORDS)
        self.backwards = Interest(text, (), _BACKWARD)

    def sites(self, tree: ast.Module) -> Iterator[Site]:
        # `self.backward()`, `self.step()` of a class of the module call its own method (whose
        # body holds the real sites), not a tensor's backward or an optimizer's step
        self.methods = {statement.name for node in _statements(tree.body)
                        if isinstance(node, ast.ClassDef) for statement in node.body
                        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef)}
        yield from self._scope(tree.body, self._runs_backward(tree.body), (0, 0))

    def _scope(
        self, body: list[ast.stmt], training: bool, scope: tuple[int, int]
    ) -> Iterator[Site]:
        for statement in body:
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
                span = (statement.lineno, statement.end_lineno or statement.lineno)
                yield from self._scope(statement.body, self._runs_backward(statement.body),
                                       span)
                continue
            if isinstance(statement, ast.ClassDef):
                yield from self._scope(statement.body, False, scope)
                continue
            if training or self.words.statement(statement):
                for node in _own_nodes(statement):
                    site = self._site(node, training)
                    if site is not None:
                        yield dataclasses.replace(site, scope=scope)
            for inner in _blocks(statement):
                yield from self._scope(inner, training, scope)

    def _runs_backward(self, body: list[ast.stmt]) -> bool:
        """Whether a block (not the functions it defines) calls a backward."""
        if not body or not self.backwards.any(body[0].lineno,
                                              body[-1].end_lineno or body[-1].lineno):
            return False
        for statement in body:
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            if self.backwards.statement(statement) and any(
                    isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "backward" for node in _own_nodes(statement)):
                return True
            if any(self._runs_backward(inner) for inner in _blocks(statement)):
                return True
        return False

    def _site(self, node: ast.AST, training: bool) -> Site | None:
        if isinstance(node, ast.ImportFrom | ast.Import):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [
                alias.name for alias in node.names]
            if any(n == m or n.startswith(m + ".") for n in names for m in _AMP_MODULES):
                return Site(node.lineno, node.col_offset, "amp", names[0])
            return None
        if isinstance(node, ast.Name | ast.Attribute) and _name(node) in _AMP_NAMES:
            return Site(node.lineno, node.col_offset, "amp", _name(node) or "")
        if not isinstance(node, ast.Call):
            return None
        func = node.func
        if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                and func.value.id == "self" and func.attr in self.methods):
            return None
        if isinstance(func, ast.Attribute) and func.attr in _METHODS:
            receiver = _text(func.value)
            if func.attr == "backward":
                scaled = isinstance(func.value, ast.Call) and isinstance(
                    func.value.func, ast.Attribute) and func.value.func.attr == "scale"
                return Site(node.lineno, node.col_offset, "amp" if scaled else "backward",
                            f"{receiver}.backward()")
            if func.attr in ("step", "zero_grad") and _may_be_optimizer(receiver, node):
                return Site(node.lineno, node.col_offset, func.attr, f"{receiver}.{func.attr}()")
            if func.attr in ("state_dict", "load_state_dict") and _OPTIMIZER.search(
                    receiver.rsplit(".", 1)[-1]):
                return Site(node.lineno, node.col_offset, "checkpoint",
                            f"{receiver}.{func.attr}()")
        dotted = _dotted(func)
        if dotted in _AUTOGRAD:
            return Site(node.lineno, node.col_offset, "backward", f"{dotted}(...)")
        model = _called_model(func) if training else None
        if model is not None and _MODEL.search(model):
            return Site(node.lineno, node.col_offset, "forward", f"{_text(func)}(...)")
        return None


def _called_model(func: ast.expr) -> str | None:
    """The name of `model(x)`, `self.net(x)`: a callable that may be a model, not a method of
    one, nor a class or a factory building one (`Generator()`, `make_model()`)."""
    if isinstance(func, ast.Name):
        name = func.id
    elif (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
          and func.value.id == "self"):
        name = func.attr
    else:
        return None
    return None if name[:1].isupper() or _FACTORY.match(name) else name


def _may_be_optimizer(receiver: str, call: ast.Call) -> bool:
    """Not plainly something else: a scheduler's or an environment's name, or data given
    (an optimizer's step takes nothing or a closure)."""
    last = receiver.rsplit(".", 1)[-1]
    if _NOT_OPTIMIZER.search(last) and not _OPTIMIZER.search(last):
        return False
    closures = all(isinstance(a, ast.Lambda) or (isinstance(a, ast.Name) and "closure" in a.id)
                   for a in call.args)
    return closures and all(k.arg == "closure" for k in call.keywords)


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement of a block, in the definitions it holds too."""
    for statement in walk_statements(body):
        yield statement
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield from _statements(statement.body)


def _own_nodes(statement: ast.stmt) -> Iterator[ast.AST]:
    """A statement and the nodes of its own lines (not its nested blocks' statements), the
    bodies of lambdas left out."""
    yield statement
    for name in statement._fields:
        if name in BLOCK_FIELDS:
            continue
        value = getattr(statement, name, None)
        for item in value if type(value) is list else (value,):
            if isinstance(item, ast.AST) and type(item) is not ast.Lambda:
                yield from subnodes(item)


def _blocks(statement: ast.stmt) -> Iterator[list[ast.stmt]]:
    for name in ("body", "orelse", "finalbody"):
        inner = getattr(statement, name, None)
        if inner and isinstance(inner[0], ast.stmt):
            yield inner
    for handler in getattr(statement, "handlers", ()):
        yield handler.body
    for case in getattr(statement, "cases", ()):
        yield case.body


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _dotted(node: ast.expr) -> str | None:
    """`torch.autograd.grad` for a chain of names, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _text(node: ast.expr) -> str:
    try:
        return ast.unparse(node)
    except (ValueError, RecursionError):
        return "..."


def unaccounted(sites: list[Site], findings: list[Finding], changed: set[int]) -> list[Site]:
    """The sites with neither a changed line nor a finding at their line. A `zero_grad()` is
    accounted for where a step of the file is (it needs no change of its own)."""
    lines = {f.line for f in findings} | changed
    stepped = any(site.kind == "step" and site.line in lines for site in sites)
    return [site for site in sites if site.line not in lines
            and not (site.kind == "zero_grad" and stepped)]


def generic_findings(sites: list[Site], findings: list[Finding]) -> list[Finding]:
    """A finding at each silent site, pointing to the finding that left its function's (or
    the module level's) training step alone, else one that left another step of the file
    alone, where there is one."""
    skips = [f for f in findings if f.severity is Severity.SKIP  # a step's refusal
             and f.message.endswith(("left unchanged", "as written", "is not written"))]
    spans = _function_spans(sites)

    def scope_of(line: int) -> tuple[int, int]:
        inner = [span for span in spans if span[0] <= line <= span[1]]
        return max(inner, key=lambda span: span[0]) if inner else (0, 0)

    out = []
    for site in sites:
        same = next((f for f in skips if scope_of(f.line) == site.scope), None)
        other = None if same is not None else next(iter(skips), None)
        out.append(Finding(SITE_WITHOUT_DISPOSITION, site.line, site.col + 1,
                           _message(site, same, other)))
    return out


def _message(site: Site, same: Finding | None, other: Finding | None) -> str:
    what = {"backward": "backward", "step": "optimizer-like step", "zero_grad": "zero_grad",
            "amp": "AMP name", "checkpoint": "optimizer checkpoint", "forward": "forward pass"}
    shown = f"`{site.text}` ({what[site.kind]})"
    if same is not None:
        return (f"{shown} is left unchanged with the rest of its training step: {same.code} "
                f"at line {same.line} says why")
    if other is not None:
        return (f"{shown} is left unchanged; {other.code} at line {other.line} reports the "
                "training step of this file left alone")
    return (f"{shown}: no role found for it in a training step amprewrite rewrote or checked; "
            "left unchanged, check it by hand")


def account(
    source: bytes, output: bytes, findings: list[Finding], tree: ast.Module | None = None
) -> list[Finding]:
    """The generic findings for the sites of `source` (parsed as `tree`, where the caller has
    it) that its rewrite `output` and its `findings` leave without a disposition."""
    sites = inventory(source, tree)
    if not sites:
        return []
    return generic_findings(unaccounted(sites, findings, changed_lines(source, output)),
                            findings)


def changed_lines(before: bytes, after: bytes) -> set[int]:
    """The input's lines the output replaced or removed, and those an insertion follows.
    Paragraphs (runs of non-blank lines) are matched first, then the lines of the paragraphs
    that differ: a rewrite leaves most paragraphs as they were (several times faster than
    matching every line of the file at once)."""
    if before == after:
        return set()
    from difflib import SequenceMatcher  # imported here: only rewritten files need it

    old, new = before.splitlines(), after.splitlines()
    old_paragraphs, new_paragraphs = _paragraphs(old), _paragraphs(new)
    changed: set[int] = set()
    matcher = SequenceMatcher(None, [p for _, p in old_paragraphs],
                              [p for _, p in new_paragraphs], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if i1 == i2:  # whole paragraphs inserted: after the last line of the one before
            changed.add(_end(old_paragraphs[i1 - 1]) if i1 else 0)
            continue
        start, end = old_paragraphs[i1][0], _end(old_paragraphs[i2 - 1])
        new_start = new_paragraphs[j1][0] if j1 < len(new_paragraphs) else len(new)
        new_end = _end(new_paragraphs[j2 - 1]) if j2 > j1 else new_start
        lines = SequenceMatcher(None, old[start:end], new[new_start:new_end], autojunk=False)
        for line_tag, a1, a2, _b1, _b2 in lines.get_opcodes():
            if line_tag in ("replace", "delete"):
                changed.update(range(start + a1 + 1, start + a2 + 1))
            elif line_tag == "insert":  # the line it follows (a step whose update comes after)
                changed.add(start + a1)
    return changed


def _paragraphs(lines: list[bytes]) -> list[tuple[int, tuple[bytes, ...]]]:
    """Each run of non-blank lines: its first line's 0-based index and its lines."""
    found: list[tuple[int, tuple[bytes, ...]]] = []
    current: list[bytes] = []
    for index, line in enumerate(lines):
        if line.strip():
            current.append(line)
            continue
        if current:
            found.append((index - len(current), tuple(current)))
            current = []
    if current:
        found.append((len(lines) - len(current), tuple(current)))
    return found


def _end(paragraph: tuple[int, tuple[bytes, ...]]) -> int:
    """The 0-based index after a paragraph's last line (its 1-based line number)."""
    return paragraph[0] + len(paragraph[1])
