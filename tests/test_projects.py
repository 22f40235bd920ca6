"""Whole projects: a training step spread over modules is rewritten as one program.

Each `fixtures/projects/<case>/` holds an `input/` tree, the `expected_O1/` tree the rewrite
of the whole directory must produce (every file, byte for byte) and `findings_O1.txt`.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import pytest
from click.testing import CliRunner

from amprewrite.cli import main
from amprewrite.project.layout import ModuleFinder, project_root
from amprewrite.project.program import load_program

PROJECTS = Path(__file__).resolve().parent.parent / "fixtures" / "projects"
CASES = sorted(p.name for p in PROJECTS.iterdir() if (p / "input").is_dir())


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def _copy(case: str, tmp_path: Path) -> Path:
    work = tmp_path / case
    shutil.copytree(PROJECTS / case / "input", work)
    (work / "pyproject.toml").write_text("[project]\nname = 'example'\n")  # the root marker
    return work


def _run(work: Path, *args: str) -> tuple[int, str]:
    cwd = os.getcwd()
    os.chdir(work)
    try:
        result = CliRunner().invoke(main, list(args))
    finally:
        os.chdir(cwd)
    return result.exit_code, result.output


def _findings(output: str) -> list[str]:
    return [line for line in output.splitlines() if ": AMP" in line]


def test_there_are_project_fixtures() -> None:
    assert len(CASES) >= 4


# The style of an `expected_<style>/` tree, and the options that produce it.
STYLE_OPTIONS = {"O1": [], "O1_plain": ["--plain"], "O2": ["--opt-level", "O2"]}
TREES = [(case, tree.name.removeprefix("expected_")) for case in CASES
         for tree in sorted((PROJECTS / case).glob("expected_*"))]


def test_every_expected_tree_has_a_known_style() -> None:
    assert {style for _, style in TREES} <= set(STYLE_OPTIONS)
    assert {"O1_plain", "O2"} <= {style for _, style in TREES}


@pytest.mark.parametrize(("case", "style"), TREES, ids=[f"{c}-{s}" for c, s in TREES])
def test_project_rewrite_matches_expected_tree(case: str, style: str, tmp_path: Path) -> None:
    work = _copy(case, tmp_path)
    code, output = _run(work, *STYLE_OPTIONS[style], ".")
    expected = _tree(PROJECTS / case / f"expected_{style}")
    assert {k: v for k, v in _tree(work).items() if k != "pyproject.toml"} == expected
    assert code == (1 if expected != _tree(PROJECTS / case / "input") else 0), output
    wanted = (PROJECTS / case / f"findings_{style}.txt").read_text().splitlines()
    assert _findings(output) == wanted


@pytest.mark.parametrize(("case", "style"), TREES, ids=[f"{c}-{s}" for c, s in TREES])
def test_project_rewrite_is_idempotent(case: str, style: str, tmp_path: Path) -> None:
    work = tmp_path / case
    shutil.copytree(PROJECTS / case / f"expected_{style}", work)
    (work / "setup.py").write_text("")  # the root marker
    before = _tree(work)
    code, output = _run(work, *STYLE_OPTIONS[style], ".")
    assert code == 0, output
    assert _tree(work) == before


# What O0 keeps of a project rewrite: correct FP32 code it cannot tell from the author's.
KEPT_BY_REVERT = {
    ("package_chain", "O1_plain"): "import torch\n",  # the plain style's own import
    ("trainer_receives_optimizer", "O2"): 'group["params"]',  # master weights' parameters
    ("base_class_checkpoints", "O2"): 'group["params"]',
    ("factory_returns_optimizer", "O1"): "loss = F.cross_entropy(",  # the hoisted loss
    ("model_module_mask_fill", "O1"): "torch.finfo(scores.dtype).min",  # right in every dtype
    ("flows_inverse_named_backward", "O1"): ".detach().to(self.s.dtype)",  # likewise
}


_AUTHORS_STEP = {
    "engine.py": """import torch


def forward_loss(model, x, y):
    with torch.autocast("cuda", dtype=torch.float16):
        return torch.nn.functional.cross_entropy(model(x), y)


def train_one_epoch(model, loader, optimizer):
    for x, y in loader:
        loss = forward_loss(model, x, y)
        optimizer.zero_grad()
        yield loss
""",
    "main.py": """import torch

from engine import train_one_epoch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
for epoch in range(2):
    for loss in train_one_epoch(model, [(torch.randn(8, 4), torch.tensor([0] * 8))], optimizer):
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    scale = scaler.get_scale()
    print(f"loss scale {scale:.0f}")
""",
}


def test_o0_leaves_a_project_whole_when_one_file_keeps_its_own_amp(tmp_path: Path) -> None:
    """The autocast in engine.py could go, but main.py's scaler cannot (`scale` is printed):
    neither file is reverted, rather than engine.py alone."""
    for name, text in _AUTHORS_STEP.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "setup.py").write_text("")
    code, output = _run(tmp_path, "--opt-level", "O0", "engine.py", "main.py")
    assert code == 0, output
    assert {name: (tmp_path / name).read_text() for name in _AUTHORS_STEP} == _AUTHORS_STEP
    found = _findings(output)
    assert any(line.startswith("main.py:14:") and " AMP425 " in line
               and "`scale` is not defined" in line for line in found), found
    assert "engine.py:1:1: AMP428 not reverted: main.py, which shares this file's training " \
        "step, keeps its mixed precision (AMP425)" in found


@pytest.mark.parametrize(("case", "style"), TREES, ids=[f"{c}-{s}" for c, s in TREES])
def test_o0_turns_a_project_rewrite_back_into_its_fp32_original(
    case: str, style: str, tmp_path: Path
) -> None:
    """Parameters, keyword arguments, `scaler or GradScaler()` lines, inherited scalers:
    everything the project rewrite added comes out again."""
    work = tmp_path / case
    shutil.copytree(PROJECTS / case / f"expected_{style}", work)
    (work / "setup.py").write_text("")
    code, output = _run(work, "--opt-level", "O0", ".")
    assert code in (0, 1), output
    reverted = {k: v for k, v in _tree(work).items() if k != "setup.py"}
    original = _tree(PROJECTS / case / "input")
    if _tree(PROJECTS / case / f"expected_{style}") == original:  # the rewrite kept it all
        # nothing of amprewrite's to take out: the files without the author's AMP stay
        # (what O0 does to the author's own AMP is tests/test_revert_keeps_code.py's)
        plain = {k for k, v in original.items() if b"autocast" not in v}
        assert plain and {k: reverted[k] for k in plain} == {k: original[k] for k in plain}
        return
    kept = KEPT_BY_REVERT.get((case, style))
    if kept is None:
        assert reverted == original
        return
    assert reverted != original
    assert any(kept.encode() in text for text in reverted.values())
    for name, text in reverted.items():
        assert b"GradScaler" not in text and b"autocast" not in text and b"scaler" not in text
        compile(text, name, "exec")


def test_check_and_diff_show_every_file_the_project_rewrite_touches(tmp_path: Path) -> None:
    work = _copy("engine_function", tmp_path)
    before = _tree(work)
    code, output = _run(work, "--check", ".")
    assert code == 1
    assert "engine.py" in output and "main.py" in output
    assert "2 files would be rewritten" in output
    code, output = _run(work, "--diff", "engine.py", "main.py")
    assert code == 1
    assert "+++ engine.py" in output and "+++ main.py" in output
    assert "scaler=scaler" in output and "scaler=None" in output
    assert _tree(work) == before


def test_named_files_are_enough_when_they_hold_the_whole_step(tmp_path: Path) -> None:
    work = _copy("engine_function", tmp_path)
    code, _ = _run(work, "main.py", "engine.py")
    assert code == 1
    expected = _tree(PROJECTS / "engine_function" / "expected_O1")
    assert (work / "main.py").read_bytes() == expected["main.py"]
    assert (work / "engine.py").read_bytes() == expected["engine.py"]


def test_an_edit_needed_in_an_unnamed_file_changes_nothing(tmp_path: Path) -> None:
    """pre-commit names only the staged files: main.py alone must not be half rewritten."""
    work = _copy("engine_function", tmp_path)
    before = _tree(work)
    code, output = _run(work, "--check", "-q", "main.py")
    assert code == 123, output  # the check hook fails, and says why even with -q
    assert _tree(work) == before
    code, output = _run(work, "main.py")
    assert code == 123, output
    assert _tree(work) == before
    [finding] = [line for line in _findings(output) if "AMP450" in line]
    assert finding.startswith("main.py:1:1: AMP450")
    assert "engine.py" in finding and "run amprewrite on main.py and engine.py" in finding


def test_a_named_callee_whose_caller_was_not_named_changes_nothing(tmp_path: Path) -> None:
    """engine.py staged alone: rewriting it as a file of its own would leave main.py's
    checkpoints without the scaler's state for good; its importer is found and named."""
    work = _copy("engine_function", tmp_path)
    before = _tree(work)
    code, output = _run(work, "engine.py", "util/misc.py")
    assert code == 123, output
    assert _tree(work) == before
    assert _findings(output) == [
        "engine.py:1:1: AMP450 the training step continues in main.py, which was not named: "
        "nothing changed; run amprewrite on engine.py and main.py together (or on the "
        "directory)"]


@pytest.mark.parametrize("stage", ["staged", "renamed"])
def test_one_file_that_cannot_be_written_leaves_every_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stage: str
) -> None:
    """trainer.py fails after train.py was staged (discarded), or renamed (put back)."""
    work = _copy("trainer_receives_optimizer", tmp_path)
    before = _tree(work)
    _fail_on(monkeypatch, "trainer.py", stage,
             PermissionError(13, "permission denied (read-only file)", "trainer.py"))
    code, output = _run(work, ".")
    assert code == 123, output
    assert _tree(work) == before
    assert "trainer.py:1:1: AMP004" in output
    assert "train.py:1:1: AMP451" in output


def _fail_on(
    monkeypatch: pytest.MonkeyPatch, name: str, stage: str, exc: BaseException
) -> None:
    """Staging (`stage="staged"`) or renaming (`"renamed"`) the file `name` raises `exc`."""
    from amprewrite import fileio
    from amprewrite.project import rewrite

    if stage == "staged":
        real_stage = rewrite.stage

        def staging(path: Path, data: bytes) -> fileio.Staged:
            if path.name == name:
                raise exc
            return real_stage(path, data)

        monkeypatch.setattr(rewrite, "stage", staging)
        return
    real_commit = fileio.Staged.commit

    def commit(self: fileio.Staged, expected: bytes | None = None) -> None:
        if self.target.name == name:
            self.discard()
            raise exc
        real_commit(self, expected)

    monkeypatch.setattr(fileio.Staged, "commit", commit)


@pytest.mark.parametrize("stage", ["staged", "renamed"])
def test_an_interruption_between_two_writes_puts_the_first_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stage: str
) -> None:
    """Not only an `Exception`: a KeyboardInterrupt (or SystemExit) raised while the second
    file is written puts the first back before it goes on (exit 130)."""
    work = _copy("trainer_receives_optimizer", tmp_path)
    before = _tree(work)
    _fail_on(monkeypatch, "trainer.py", stage, KeyboardInterrupt())
    code, output = _run(work, ".")
    assert code == 130, output
    assert _tree(work) == before


def test_every_file_of_a_group_is_staged_before_the_first_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL can leave a group half rewritten only between two renames."""
    work = _copy("trainer_receives_optimizer", tmp_path)
    staged_at_renames: list[int] = []
    real_replace = os.replace

    def replace(source: str, target: Path) -> None:
        staged_at_renames.append(len(list(work.glob(".*.amprewrite"))))
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", replace)
    code, output = _run(work, ".")
    assert code == 1, output
    assert staged_at_renames == [2, 1]


def test_ctrl_c_while_a_group_is_written_takes_effect_once_it_is_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from amprewrite import fileio

    work = _copy("trainer_receives_optimizer", tmp_path)
    before = _tree(work)
    real_commit = fileio.Staged.commit

    def commit(self: fileio.Staged, expected: bytes | None = None) -> None:
        real_commit(self, expected)
        if self.target.name == "train.py":  # Ctrl-C after the first of the two renames
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(fileio.Staged, "commit", commit)
    # Python's own Ctrl-C handler, as in a terminal: a pytest-xdist worker (or a background
    # job) ignores SIGINT, and the rewrite restores whatever handler it found.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code, output = _run(work, ".")
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
    assert code == 130, output
    after = _tree(work)
    assert all(after[name] != before[name] for name in ("train.py", "trainer.py"))


def test_imports_resolve_relative_absolute_and_from_the_script_directory(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text("")
    package = tmp_path / "src" / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "engine.py").write_text("import torch\n")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "helpers.py").write_text("")
    finder = ModuleFinder(project_root([tmp_path / "tools" / "helpers.py"]))
    assert finder.root == tmp_path
    engine = (package / "engine.py").resolve()
    assert finder.find(package / "__init__.py", "engine", level=1) == engine
    assert finder.find(package / "engine.py", "", level=1) == (package / "__init__.py").resolve()
    assert finder.find(tmp_path / "tools" / "x.py", "pkg.engine") == engine  # under src/
    assert finder.find(tmp_path / "tools" / "x.py", "helpers") == (
        tmp_path / "tools" / "helpers.py").resolve()
    assert finder.find(tmp_path / "tools" / "x.py", "torch") is None  # not in the project


def test_only_reachable_modules_that_mention_torch_are_read(tmp_path: Path) -> None:
    work = _copy("engine_function", tmp_path)
    (work / "unrelated.py").write_text("import torch\n")
    (work / "notes.py").write_text("VALUE = 1\n")
    with (work / "main.py").open("a") as main_py:
        main_py.write("import notes\n")
    program = load_program({(work / "main.py").resolve(): "main.py"})
    read = {p.relative_to(work.resolve()).as_posix() for p in program.sources}
    assert read == {"main.py", "engine.py", "models.py", "util/misc.py", "notes.py"}
    assert program.groups == [[(work / "engine.py").resolve(), (work / "main.py").resolve()]]


def test_rules_acting_across_modules_are_shown_by_project_fixtures() -> None:
    from amprewrite.rules.registry import all_rules

    shown = [rule for rule in all_rules().values() if rule.projects]
    assert shown
    for rule in shown:
        for case in rule.projects:
            reported = (PROJECTS / case / "findings_O1.txt").read_text()
            assert any(code in reported for code in rule.codes), (rule.name, case)
        every = "".join((PROJECTS / c / "findings_O1.txt").read_text() for c in rule.projects)
        assert all(code in every for code in rule.codes), rule.name


@pytest.mark.parametrize(("before", "after"), [
    ("def f(a, b=1):\n    pass\n", "def f(a, b=1, scaler=None):\n    pass\n"),
    ("def f():\n    pass\n", "def f(scaler=None):\n    pass\n"),
    ("def f(*args, **kwargs):\n    pass\n", "def f(*args, scaler=None, **kwargs):\n    pass\n"),
    ("def f(a, **kwargs):\n    pass\n", "def f(a, scaler=None, **kwargs):\n    pass\n"),
    ("def f(a, *, b):\n    pass\n", "def f(a, *, b, scaler=None):\n    pass\n"),
    ("def f(\n    a,\n    b,\n):\n    pass\n",
     "def f(\n    a,\n    b,\n    scaler=None,\n):\n    pass\n"),
    ("def f(self, a: int = 0):\n    pass\n", "def f(self, a: int = 0, scaler=None):\n    pass\n"),
])
def test_a_new_parameter_goes_where_python_allows_it(before: str, after: str) -> None:
    import libcst as cst

    from amprewrite.rules.edits import append_parameter

    module = cst.parse_module(before)
    function = module.body[0]
    assert isinstance(function, cst.FunctionDef)
    new = append_parameter("scaler", cst.Name("None"))(function.params)
    assert isinstance(new, cst.Parameters)
    assert module.with_changes(body=[function.with_changes(params=new)]).code == after


def test_a_class_receiver_that_does_not_hold_every_use_links_nothing(tmp_path: Path) -> None:
    """`self.scaler` cannot serve a module function too: each file is rewritten alone."""
    work = _copy("trainer_receives_optimizer", tmp_path)
    trainer = work / "trainer.py"
    trainer.write_text(trainer.read_text() + (
        "\n\ndef finetune(model, optimizer, loader):\n"
        "    for inputs, targets in loader:\n"
        "        optimizer.zero_grad()\n"
        "        nn.functional.cross_entropy(model(inputs), targets).backward()\n"
        "        optimizer.step()\n"))
    code, output = _run(work, ".")
    assert code == 1, output
    assert "AMP123" not in output and "AMP124" not in output
    assert "scaler=scaler" not in (work / "train.py").read_text()
    compile((work / "trainer.py").read_text(), "trainer.py", "exec")


def test_one_file_that_cannot_be_rewritten_leaves_the_others_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from amprewrite import engine
    from amprewrite.engine import RewriteError
    from amprewrite.findings import CANNOT_PROCESS, Finding

    work = _copy("engine_function", tmp_path)
    before = _tree(work)
    real_rewrite = engine.rewrite_analysed

    def rewrite(analysis, source, options):  # type: ignore[no-untyped-def]
        if b"def train_one_epoch" in source:
            raise RewriteError(Finding(CANNOT_PROCESS, 1, 1, "internal error: test"))
        return real_rewrite(analysis, source, options)

    monkeypatch.setattr(engine, "rewrite_analysed", rewrite)
    code, output = _run(work, ".")
    assert code == 123, output
    assert _tree(work) == before
    assert "engine.py:1:1: AMP004 internal error: test" in output
    assert ("main.py:1:1: AMP451 not rewritten: engine.py, which shares this file's training "
            "step, cannot be rewritten (AMP004)") in output


def test_a_call_that_passes_no_optimizer_passes_no_scaler(tmp_path: Path) -> None:
    """`load_checkpoint(path, model)` restores no optimizer: the caller needs no scaler."""
    (tmp_path / "setup.py").write_text("")
    (tmp_path / "utils.py").write_text(
        "import torch\n\n\ndef load_checkpoint(path, model, optimizer=None):\n"
        "    state = torch.load(path)\n    model.load_state_dict(state['model'])\n"
        "    if optimizer:\n        optimizer.load_state_dict(state['optim'])\n")
    (tmp_path / "count.py").write_text(
        "import torch\n\nimport utils\n\nmodel = torch.nn.Linear(2, 2)\n"
        "utils.load_checkpoint('last.pt', model)\nutils.load_checkpoint('a.pt', model, None)\n")
    before = _tree(tmp_path)
    code, output = _run(tmp_path, ".")
    assert code == 0, output
    assert _tree(tmp_path) == before


def test_many_named_files_are_outlined_in_processes_with_the_same_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from amprewrite.project import program

    work = _copy("package_chain", tmp_path)
    named = {p.resolve(): str(p) for p in sorted(work.rglob("*.py"))}
    alone = program.load_program(named, jobs=1)
    monkeypatch.setattr(program, "_PARALLEL_FROM", 1)
    pooled = program.load_program(named, jobs=2)
    assert pooled.groups == alone.groups == [sorted(
        (work / name).resolve() for name in
        ("train.py", "pkg/loops.py", "pkg/engine.py", "pkg/checkpointing.py"))]
    assert pooled.outlines == alone.outlines


def test_a_package_module_imports_from_where_the_scripts_run(tmp_path: Path) -> None:
    """`trainer/trainer.py` says `from base import BaseTrainer`: Python finds `base` next to
    the script run from the named directory, wherever the project root is."""
    (tmp_path / ".git").mkdir()
    work = tmp_path / "experiments" / "template"
    shutil.copytree(PROJECTS / "base_class_checkpoints" / "input", work)
    code, output = _run(work, ".")
    assert code == 1, output
    assert "AMP125" in output
    expected = _tree(PROJECTS / "base_class_checkpoints" / "expected_O1")
    assert _tree(work) == expected


@pytest.mark.parametrize("named", ["engine.py", "main.py"])
def test_o0_on_half_a_rewritten_step_changes_nothing(named: str, tmp_path: Path) -> None:
    """Reverting engine.py alone would drop the `scaler` parameter main.py still passes."""
    work = tmp_path / "project"
    shutil.copytree(PROJECTS / "engine_function" / "expected_O1", work)
    (work / "setup.py").write_text("")
    before = _tree(work)
    code, output = _run(work, "--opt-level", "O0", named)
    assert code == 123, output
    assert _tree(work) == before
    [finding] = _findings(output)
    assert finding.startswith(f"{named}:1:1: AMP450")


def test_a_module_a_package_re_exports_is_followed(tmp_path: Path) -> None:
    """`from pkg import training` where pkg/__init__.py says `from .utils import training`
    (facenet-pytorch's layout): `training.pass_epoch(...)` is pkg/utils/training.py's."""
    (tmp_path / "setup.py").write_text("")
    (tmp_path / "pkg" / "utils").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("from .utils import training\n")
    (tmp_path / "pkg" / "utils" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "utils" / "training.py").write_text(
        "def pass_epoch(model, loss_fn, loader, optimizer):\n"
        "    for x, y in loader:\n        loss_fn(model(x), y).backward()\n"
        "        optimizer.step()\n        optimizer.zero_grad()\n")
    (tmp_path / "train.py").write_text(
        "import torch\nfrom pkg import training\n\nmodel = torch.nn.Linear(4, 2)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "training.pass_epoch(model, torch.nn.functional.cross_entropy, [], optimizer)\n"
        "torch.save({'optimizer': optimizer.state_dict()}, 'last.pt')\n")
    code, output = _run(tmp_path, ".")
    assert code == 1, output
    assert "pkg/utils/training.py:1:5: AMP123" in output
    assert "scaler=scaler)" in (tmp_path / "train.py").read_text()
    assert "'scaler': scaler.state_dict()" in (tmp_path / "train.py").read_text()


def test_a_rejected_rewrite_of_one_file_leaves_the_whole_step_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """engine.py clips without the `unscale_` a planner forgot: its rewrite is rejected, and
    main.py, which would pass it the scaler, is left as it was too."""
    import dataclasses

    from amprewrite import engine

    choose = engine.choose

    def without_unscaling(analysis: object, options: object) -> object:
        recipe = choose(analysis, options)  # type: ignore[arg-type]
        return dataclasses.replace(
            recipe, rules=tuple(r for r in recipe.rules if r.name != "unscaling"))

    monkeypatch.setattr(engine, "choose", without_unscaling)
    work = _copy("engine_function", tmp_path)
    before = _tree(work)
    code, output = _run(work, ".")
    assert _tree(work) == before, output
    found = _findings(output)
    assert any(line.startswith("engine.py:26:13: AMP706 ") for line in found), found
    assert ("main.py:1:1: AMP452 not rewritten: the rewrite of engine.py, which shares this "
            "file's training step, was rejected by the protocol check") in found
    assert code == 0
