"""Generated programs as tests (issue 36, part 3): FP32 training programs from
tests/programs.py, rewritten at O1 (and O2), must come out compiled, clean under the protocol
checker (no violation the input did not have, and no plan the engine had to reject), and with
every backward and step site of the input either changed or carrying a finding at its line
(the ledger). A sample is trained in bfloat16 and float16 against FP32. Mutants of correct
rewrites, each breaking one invariant at one site, must be rejected: by the checker, or, for a
lost import and a statement changed outside the plan, by the engine's verification.

The bugs the generator found and that are not fixed yet are in `KNOWN`, each with its
minimised program: the properties skip what a known bug covers, and
`test_each_known_bug_is_still_there` fails once it is fixed, so that its entry goes.
"""

from __future__ import annotations

import ast
import difflib
import functools
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import libcst as cst
import nbformat
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from nbformat.v4 import new_code_cell, new_notebook

from amprewrite import engine
from amprewrite.engine import rewrite_source
from amprewrite.findings import Finding
from amprewrite.notebook_cells import CellFinding
from amprewrite.notebooks import rewrite_notebook
from amprewrite.options import Options
from amprewrite.protocol.check import violations
from amprewrite.protocol.invariants import REJECTIONS, Violation
from tests.execution import (
    BFLOAT16,
    DTYPE_ENVS,
    FLOAT16,
    FLOAT16_ENV,
    FLOAT32,
    Job,
    ScriptRun,
    fp32_twin,
    run_scripts,
)
from tests.program_mutants import MUTATIONS
from tests.programs import AMPS, PROFILE, Program, programs

REJECTED = frozenset(code for code in REJECTIONS)
LEVELS = st.sampled_from(["O1", "O2"])


# --- one rewrite, and what it did wrong ---

@dataclass(frozen=True)
class Rewrite:
    """A program and its rewrite, each as one text (a notebook's code cells joined), and the
    findings, on lines of `before`."""

    program: Program
    opt_level: str
    before: str
    after: str
    findings: tuple[Finding, ...]


@functools.cache
def rewrite(program: Program, opt_level: str = "O1") -> Rewrite:
    options = Options(opt_level=opt_level)
    if program.home != "notebook":
        result = rewrite_source(program.source.encode(), options)
        return Rewrite(program, opt_level, program.source, result.source.decode(),
                       tuple(result.findings))
    cells = program.cells
    notebook = new_notebook(cells=[new_code_cell(text.rstrip("\n"), id=f"c{n}")
                                   for n, text in enumerate(cells)])
    rewritten = rewrite_notebook((nbformat.writes(notebook) + "\n").encode(), options)
    after = [cell.source + "\n" for cell in nbformat.reads(rewritten.source.decode(),
                                                           as_version=4).cells]
    starts = [sum(text.count("\n") for text in cells[:n]) for n in range(len(cells))]
    findings = tuple(Finding(f.code, starts[f.cell - 1] + f.line, f.col, f.message)
                     if isinstance(f, CellFinding) else f for f in rewritten.findings)
    return Rewrite(program, opt_level, "".join(cells), "".join(after), findings)


@dataclass(frozen=True)
class Problem:
    kind: str  # "input", "crash", "rejected", "violation", "silent"
    text: str
    code: str = ""  # of a violation or rejection

    @property
    def names(self) -> set[str]:
        """What a known bug's `kinds` may name it by: its kind, or its kind and code."""
        return {self.kind, f"{self.kind} {self.code}"}

    def __str__(self) -> str:
        return f"{self.kind}: {self.text}"


def problems(done: Rewrite) -> list[Problem]:
    """Every property `done` breaks: the generated input is clean, the output compiles, the
    engine rejected nothing, the output has no violation the input had not, and every site
    (at O2 also the model's cast) has a disposition."""
    found = [Problem("input", f"the checker rejects the generated program: {v.code} line "
                     f"{v.line} {v.message}", v.code) for v in _violations(done.before)]
    try:
        compile(done.after, "rewritten.py", "exec")
    except SyntaxError as exc:
        return [*found, Problem("crash", f"the rewrite does not compile: {exc}")]
    found += [Problem("rejected", f"the engine rejected its plan: {f.format('t.py')}", f.code)
              for f in done.findings if f.code in REJECTED]
    baseline = Counter((v.code, v.scope) for v in _violations(done.before))
    for v in _violations(done.after):
        if baseline[(v.code, v.scope)] > 0:
            baseline[(v.code, v.scope)] -= 1
        else:
            found.append(Problem("violation", f"the rewrite breaks {v.code} at its line "
                                 f"{v.line} ({v.site}): {v.message}", v.code))
    codes = {f.code for f in done.findings}
    created = done.after.count("GradScaler(") > done.before.count("GradScaler(")
    if done.opt_level in ("O2", "O3") and created and not codes & {"AMP160", "AMP260"}:
        found.append(Problem("silent", f"at {done.opt_level} the model is neither cast (AMP160) "
                             "nor reported uncast (AMP260)"))
    if done.program.amp != "fp32":
        return found  # the author's own AMP is checked whole by the lint, not site by site
    disposed = {f.line for f in done.findings} | _changed_lines(done.before, done.after)
    found += [Problem("silent", f"line {line} `{site}`: neither changed nor reported")
              for line, site in sites(done.before) if line not in disposed]
    return found


def _violations(source: str) -> list[Violation]:
    return violations(ast.parse(source), source)


MODELS = frozenset({"model", "generator", "critic"})  # the generated programs' models


def sites(source: str) -> list[tuple[int, str]]:
    """The sites of a program the rewrite must account for, by line: its backward passes
    (`.backward(`, `torch.autograd.backward(`, `torch.autograd.grad(`), its steps, and the
    checkpoint calls of anything but a model (an optimizer, or `obj` of a loop over them)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = ast.unparse(func)
        if (name.endswith((".backward", ".step"))
                or name in ("torch.autograd.backward", "torch.autograd.grad")
                or (isinstance(func, ast.Attribute) and func.attr in ("state_dict",
                                                                      "load_state_dict")
                    and ast.unparse(func.value).rsplit(".", 1)[-1] not in MODELS)):
            found.append((node.lineno, ast.unparse(node)))
    return sorted(found)


def _changed_lines(before: str, after: str) -> set[int]:
    matcher = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(),
                                      autojunk=False)
    return {line + 1 for tag, i1, i2, _, _ in matcher.get_opcodes() if tag != "equal"
            for line in range(i1, i2)}


# --- the bugs found, not fixed yet ---

@dataclass(frozen=True)
class Known:
    """A bug the generator found: the programs it covers (given their rewrite), its
    minimised program, and the kinds of problem it causes there."""

    what: str
    covers: Callable[[Rewrite], bool]
    example: Program
    kinds: frozenset[str]
    opt_level: str = "O1"  # the example's


KNOWN: dict[str, Known] = {
    "step helper shared by a refused backward": Known(
        "planner: `optimizer_step(optimizer)` serves the refused `loss.backward(torch.ones_like"
        "(loss))` (AMP207) and the scaled lazy penalty: the helper is routed through the "
        "scaler anyway (AMP702, AMP708)",
        lambda d: (d.program.helpers in ("step", "both") and d.program.step == "lazy"
                   and d.program.backward == "seeded"),
        Program(step="lazy", backward="seeded", helpers="step"),
        frozenset({"rejected AMP702", "rejected AMP708", "silent"})),
    "closure's scaler in a checkpoint helper": Known(
        "planner (lint): the module-level `save_checkpoint` gets `scaler.state_dict()` for a "
        "scaler local to `main()` (AMP709)",
        lambda d: (d.program.amp != "fp32" and d.program.home == "closure"
                   and d.program.checkpoint == "helper"),
        Program(amp="enabled", home="closure", checkpoint="helper"),
        frozenset({"rejected AMP709", "silent"})),
    "O2 with optimizers in a container": Known(
        "planner: at O2 optimizers held in a dict, list or `SimpleNamespace` get no "
        "`scaler.initialize(model, optimizer)` and no AMP260: the rewrite trains in float32 "
        "(the runtime warns at the first step)",
        lambda d: d.opt_level in ("O2", "O3") and d.program.holder in ("dict", "list",
                                                                       "namespace"),
        Program(holder="dict"), frozenset({"silent"}), "O2"),
    "checkpoint through **kwargs or a comprehension": Known(
        "planner: `save_checkpoint(path, model=model, optimizer=optimizer)` saving "
        "`{name: obj.state_dict() for name, obj in objects.items()}` (and its restorer looping "
        "`obj.load_state_dict(checkpoint[name])`) gets no scaler state and no finding (the "
        "issue's keyword-driven restorer); an inline dict comprehension likewise",
        lambda d: d.program.checkpoint in ("kwargs", "comprehension"),
        Program(checkpoint="kwargs"), frozenset({"silent"})),
}


def unexplained(done: Rewrite) -> list[Problem]:
    """The problems of `done` that no known bug covers."""
    covered = {kind for known in KNOWN.values() if known.covers(done) for kind in known.kinds}
    return [problem for problem in problems(done) if not problem.names & covered]


@pytest.mark.parametrize("name", KNOWN)
def test_each_known_bug_is_still_there(name: str) -> None:
    known = KNOWN[name]
    done = rewrite(known.example, known.opt_level)
    assert known.covers(done)
    kinds = {name for problem in problems(done) for name in problem.names}
    assert kinds & known.kinds, f"fixed? {name}: remove it from KNOWN ({known.what})"


# --- the properties ---

def _check_rewrite(program: Program, opt_level: str) -> None:
    found = unexplained(rewrite(program, opt_level))
    assert not found, "\n".join(map(str, found)) + "\n\n" + program.source


@settings(PROFILE, max_examples=10)
@given(program=programs(amp=AMPS), opt_level=LEVELS)
@example(program=Program(), opt_level="O1")
@example(program=Program(home="notebook", step="gan", clip="direct"), opt_level="O1")
def test_a_rewrite_is_compiled_clean_and_accounts_for_every_site(
    program: Program, opt_level: str
) -> None:
    _check_rewrite(program, opt_level)


@pytest.mark.slow
@settings(PROFILE, max_examples=100)
@given(program=programs(amp=AMPS), opt_level=LEVELS)
def test_many_rewrites_are_compiled_clean_and_account_for_every_site(
    program: Program, opt_level: str
) -> None:
    _check_rewrite(program, opt_level)


# --- mutants of correct rewrites ---

def _correct(program: Program, opt_level: str) -> Rewrite:
    """The rewrite of `program` where it is a correct AMP program (else the test example is
    rejected)."""
    done = rewrite(program, opt_level)
    assume(done.after != done.before and not _violations(done.after)
           and not any(f.code in REJECTED for f in done.findings))
    return done


def _check_mutant(program: Program, opt_level: str, mutation: str,
                  data: st.DataObject | None) -> None:
    done = _correct(program, opt_level)
    mutants = MUTATIONS[mutation].mutants(done.after)
    assume(mutants)
    mutant = mutants[0] if data is None else data.draw(st.sampled_from(mutants), "mutant")
    codes = {v.code for v in _violations(mutant)}
    assert codes & MUTATIONS[mutation].codes, f"{mutation} not caught ({codes})\n{mutant}"


@settings(PROFILE, max_examples=6)
@given(program=programs(), opt_level=LEVELS, mutation=st.sampled_from(sorted(MUTATIONS)),
       data=st.data())
@example(program=Program(clip="direct"), opt_level="O1", mutation="drop unscale_",
         data=None)
def test_a_mutant_of_a_correct_rewrite_is_rejected_by_the_checker(
    program: Program, opt_level: str, mutation: str, data: st.DataObject | None
) -> None:
    _check_mutant(program, opt_level, mutation, data)


class _Corrupt(cst.CSTTransformer):
    """What a broken transformer might do besides the plan: lose the runtime's import, or
    change a statement no edit is on (the seed)."""

    def __init__(self, how: str) -> None:
        self.how = how

    def leave_SimpleStatementLine(
        self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
    ) -> cst.BaseStatement | cst.RemovalSentinel:
        code = cst.Module([]).code_for_node(original)
        if self.how == "import removed" and code.startswith("from amprewrite_runtime import"):
            return cst.RemoveFromParent()
        if self.how == "unrelated statement changed" and code.strip() == "torch.manual_seed(0)":
            return cst.parse_statement("torch.manual_seed(1)\n")
        return updated


ENGINE_MUTATIONS = {"import removed": "AMP709", "unrelated statement changed": "AMP710"}


@settings(PROFILE, max_examples=4)
@given(program=programs(homes=("module", "function", "method", "closure", "callback")),
       how=st.sampled_from(sorted(ENGINE_MUTATIONS)))
def test_a_corrupted_output_is_rejected_by_the_engine(program: Program, how: str) -> None:
    """The engine's verification (tests/test_verification.py) on generated programs: a
    transformer that loses the runtime's import or changes an unrelated statement."""
    _correct(program, "O1")
    apply = engine.apply_edits

    def corrupting(module: cst.Module, *args: object) -> cst.Module:
        return apply(module, *args).visit(_Corrupt(how))  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "apply_edits", corrupting)
        result = rewrite_source(program.source.encode(), Options())
    assert ENGINE_MUTATIONS[how] in {f.code for f in result.findings}, program.source
    assert result.source == program.source.encode()  # nothing of the broken plan is written


@pytest.mark.slow
@settings(PROFILE, max_examples=40)
@given(program=programs(), opt_level=LEVELS, mutation=st.sampled_from(sorted(MUTATIONS)),
       data=st.data())
def test_many_mutants_are_rejected_by_the_checker(
    program: Program, opt_level: str, mutation: str, data: st.DataObject
) -> None:
    _check_mutant(program, opt_level, mutation, data)


# --- a sample, trained ---

EXECUTED = [
    Program(clip="direct", checkpoint="inline"),
    Program(home="function", holder="keyword", step="gan", clip="helper", checkpoint="kwargs"),
    Program(home="method", holder="dict", step="two_losses", accumulate=True,
             checkpoint="comprehension", zero="set_to_none"),
    Program(home="closure", holder="namespace", step="wgan", checkpoint="helper"),
    Program(home="callback", backward="autograd", accumulate=True, helpers="both"),
    Program(home="notebook", step="attack", zero="grads_none"),
]
RUNS = [(p, "O1") for p in EXECUTED] + [(EXECUTED[0], "O2")]
# How far a low-precision run's losses may stray from FP32's, anywhere along the run: bfloat16
# keeps ~3 significant digits, float16 ~4 (compared with the FP32 run skipping the steps it
# skipped). Measured on the sample: at most 0.033 in bfloat16, 0.007 in float16; a step that
# divides a critic's unscaled gradients by the scale strays by 7.9.
TOLERANCE = {BFLOAT16: 0.1, FLOAT16: 0.05}


def _write(directory: Path, done: Rewrite) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "input.py").write_text(done.before)
    (directory / "rewritten.py").write_text(done.after)
    return directory / "input.py", directory / "rewritten.py"


def _strays(amp: ScriptRun, fp32: ScriptRun) -> float:
    """How far `amp`'s losses stray from `fp32`'s at most, relative to them (inf: a loss is not
    finite, or the runs backpropagated different numbers of losses)."""
    if not (len(amp.losses) == len(fp32.losses) > 0):
        return math.inf
    if not all(math.isfinite(loss) for loss in amp.losses):
        return math.inf
    return max(abs(a - b) / (abs(b) + 1e-3) for a, b in zip(amp.losses, fp32.losses,
                                                             strict=True))


def _trained(path: Path, fp32: Job) -> dict[str, float]:
    """How far each low-precision run of `path` strays from FP32 (see `TOLERANCE`)."""
    runs = run_scripts([fp32, *(Job.of(path, env=env) for env in DTYPE_ENVS.values())])
    reference, out = runs[0], {}
    assert reference.ok and set(reference.train_dtypes) == {FLOAT32}, reference.explain()
    for dtype, run in zip(DTYPE_ENVS, runs[1:], strict=True):
        assert run.ok, run.explain()
        assert dtype in run.train_dtypes, "the training forward did not run under autocast"
        assert run.optimizer_steps == reference.optimizer_steps
        compared = reference
        if dtype == FLOAT16:
            assert any(run.backward_scaled), "no loss went through an enabled GradScaler"
            compared = fp32_twin(fp32, run).run()
            assert compared.ok and compared.optimizer_steps_taken == run.optimizer_steps_taken
        out[dtype] = _strays(run, compared)
    return out


@pytest.mark.slow
@pytest.mark.parametrize(("program", "opt_level"), RUNS, ids=lambda x: str(x) or "plain")
def test_a_generated_rewrite_trains_like_fp32(
    tmp_path: Path, program: Program, opt_level: str
) -> None:
    done = rewrite(program, opt_level)
    assert not unexplained(done) and done.after != done.before
    source, rewritten = _write(tmp_path, done)
    strays = _trained(rewritten, Job.of(source))
    assert all(strays[dtype] <= TOLERANCE[dtype] for dtype in strays), strays


@pytest.mark.slow
def test_the_comparison_fails_a_step_that_divides_unscaled_gradients(tmp_path: Path) -> None:
    """The sample trains long enough to tell: a WGAN critic whose seeded backward is left
    unscaled while `scaler.step` divides its gradients by the scale (the issue's float16
    bug) strays from FP32."""
    done = rewrite(EXECUTED[3])
    mutant = next(m for m in MUTATIONS["unscaled backward into a scaled step"].mutants(
        done.after) if "d_real.backward(MONE)" in m)
    source, _ = _write(tmp_path, done)
    (tmp_path / "mutant.py").write_text(mutant)
    run = Job.of(tmp_path / "mutant.py", env=FLOAT16_ENV).run()
    assert run.ok, run.explain()
    assert _strays(run, fp32_twin(Job.of(source), run).run()) > 10 * TOLERANCE[FLOAT16]


# The author's AMP, its FP32 path (`USE_AMP = False`) run before and after the lint's edits.
LINT_RUNS = [
    Program(amp="enabled", home="function", holder="keyword", checkpoint="inline"),
    Program(amp="enabled", home="method", step="gan", checkpoint="inline"),
    Program(amp="enabled", home="notebook", holder="namespace", checkpoint="helper"),
]


def _lint_runs(directory: Path, program: Program) -> tuple[ScriptRun, ScriptRun]:
    source, rewritten = _write(directory, rewrite(program))
    before, after = run_scripts([Job.of(source), Job.of(rewritten)])
    assert before.ok, before.explain()
    return before, after


@pytest.mark.slow
@pytest.mark.parametrize("program", LINT_RUNS, ids=str)
def test_a_lint_rewrite_keeps_the_fp32_path(tmp_path: Path, program: Program) -> None:
    done = rewrite(program)
    assert not unexplained(done) and done.after != done.before
    before, after = _lint_runs(tmp_path, program)
    assert after.ok, after.explain()
    assert after.losses == before.losses


@dataclass(frozen=True)
class KnownRun:
    """A bug found by running a rewrite (the checker passes it): the minimised program,
    its opt level, and what goes wrong."""

    what: str
    program: Program
    opt_level: str = "O1"


KNOWN_RUNS = {
    "O2 GAN: the critic's stale gradients": KnownRun(
        "runtime: at O2 `opt_d.zero_grad()` clears the float32 masters' gradients, not the "
        "critic's own, which the generator's backward filled after the critic's step: the "
        "next critic step applies them too (FP32 clears them); `critic.zero_grad()` fixes it",
        Program(step="gan"), "O2"),
    "O2 WGAN: weight clipping of the model": KnownRun(
        "runtime and planner: besides the stale gradients, `p.data.clamp_(-0.5, 0.5)` over "
        "`critic.parameters()` after the step clamps the model, not the masters the next step "
        "copies back; no finding",
        Program(step="wgan"), "O2"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", KNOWN_RUNS)
def test_each_known_training_bug_is_still_there(tmp_path: Path, name: str) -> None:
    known = KNOWN_RUNS[name]
    done = rewrite(known.program, known.opt_level)
    assert not unexplained(done)
    if known.program.amp != "fp32":
        _, after = _lint_runs(tmp_path, known.program)
        assert not after.ok, f"fixed? {name}: move it to LINT_RUNS"
        return
    source, rewritten = _write(tmp_path, done)
    strays = _trained(rewritten, Job.of(source))
    assert any(strays[dtype] > TOLERANCE[dtype] for dtype in strays), (
        f"fixed? {name}: move it to RUNS ({strays})")
