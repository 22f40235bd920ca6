"""The site ledger: every backward, optimizer-like step, optimizer checkpoint, AMP name and
forward pass next to a backward gets a disposition, its line changed or a finding at it; a
site with neither gets AMP011, which points to the finding that left its training step alone
where there is one. Directory runs, single files and notebooks report alike."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from amprewrite.cli import main
from amprewrite.engine import rewrite_source
from amprewrite.ledger import changed_lines, inventory
from amprewrite.options import Options


def _sites(source: str) -> list[tuple[int, str]]:
    return [(site.line, site.kind) for site in inventory(source.encode())]


def test_the_inventory_reads_the_sites_syntactically() -> None:
    source = textwrap.dedent("""\
        import torch
        from torch.cuda.amp import autocast
        scheduler.step()
        env.step(action)
        sampler.step(closure)

        class Learner:
            def step(self):
                self.opt.step()

            def fit(self, x):
                self.opt.zero_grad()
                loss = self.model(x).sum()
                loss.backward()
                self.step()
                torch.save(self.opt.state_dict(), "o.pt")
                model = Generator()
    """)
    assert _sites(source) == [(2, "amp"), (5, "step"), (9, "step"),
                              (12, "zero_grad"), (13, "forward"), (14, "backward"),
                              (16, "checkpoint")]


def test_a_rewritten_training_step_has_every_site_accounted_for() -> None:
    source = Path(__file__).resolve().parents[1] / "fixtures" / "mnist_functions" / "input.py"
    result = rewrite_source(source.read_bytes(), Options())
    assert result.changed and not [f for f in result.findings if f.code == "AMP011"]


def test_a_refused_step_s_other_sites_point_to_why() -> None:
    """The step refused at one line: its forward, backward and zeroing are not silent."""
    source = textwrap.dedent("""\
        import torch


        def train(model, loader, optimizer=None):
            for x in loader:
                model.zero_grad()
                loss = model(x).pow(2).mean()
                loss.backward()
                if optimizer is None:
                    for p in model.parameters():
                        p.data -= 0.1 * p.grad
                else:
                    optimizer.step()
    """)
    result = rewrite_source(source.encode(), Options())
    assert not result.changed
    refusal = next(f for f in result.findings if f.code.startswith("AMP2"))
    generic = {f.line: f.message for f in result.findings if f.code == "AMP011"}
    assert set(generic) >= {6, 7, 8} - {refusal.line}
    assert all(message.endswith(f"{refusal.code} at line {refusal.line} says why")
               for message in generic.values())


WRAPPER = textwrap.dedent("""\
    class ScheduledOptim:
        \"\"\"A learning-rate schedule around an optimizer; this module names no framework.\"\"\"

        def __init__(self, optimizer, warmup):
            self._optimizer = optimizer
            self.warmup = warmup

        def step_and_update_lr(self):
            self._update_learning_rate()
            self._optimizer.step()

        def zero_grad(self):
            self._optimizer.zero_grad()

        def _update_learning_rate(self):
            pass
""")


def test_a_module_the_text_filter_skips_still_accounts_for_its_steps() -> None:
    result = rewrite_source(WRAPPER.encode(), Options())
    assert [(f.code, f.line) for f in result.findings if f.code != "AMP001"] == [
        ("AMP011", 10), ("AMP011", 13)]


@pytest.mark.parametrize("named", [True, False])
def test_a_directory_run_reports_silent_sites_as_a_file_run_does(
    tmp_path: Path, named: bool
) -> None:
    (tmp_path / "optim.py").write_text(WRAPPER)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(main, ["--check", "optim.py" if named else "."])
    finally:
        os.chdir(cwd)
    assert [line for line in result.output.splitlines() if "AMP011" in line] == [
        "optim.py:10:9: AMP011 `self._optimizer.step()` (optimizer-like step): no role found "
        "for it in a training step amprewrite rewrote or checked; left unchanged, check it by "
        "hand",
        "optim.py:13:9: AMP011 `self._optimizer.zero_grad()` (zero_grad): no role found for "
        "it in a training step amprewrite rewrote or checked; left unchanged, check it by hand"]


def test_a_notebook_cell_s_silent_site_is_reported_in_its_cell(tmp_path: Path) -> None:
    cells = ["steps = 0", WRAPPER]
    notebook = {"cells": [{"cell_type": "code", "execution_count": None, "id": f"c{i}",
                           "metadata": {}, "outputs": [], "source": source}
                          for i, source in enumerate(cells)],
                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "demo.ipynb"
    path.write_text(json.dumps(notebook))
    result = CliRunner().invoke(main, ["--check", str(path)])
    assert f"{path}:cell 2:10:9: AMP011 `self._optimizer.step()`" in result.output


def test_at_o0_fp32_sites_are_what_was_asked() -> None:
    result = rewrite_source(WRAPPER.encode(), Options(opt_level="O0"))
    assert not [f for f in result.findings if f.code == "AMP011"]


def _every_line_diff(before: bytes, after: bytes) -> set[int]:
    """The changed lines as one match of every line of the file finds them (blank lines too,
    where no site can be)."""
    import difflib

    changed: set[int] = set()
    matcher = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(),
                                      autojunk=False)
    for tag, i1, i2, _j1, _j2 in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            changed.update(range(i1 + 1, i2 + 1))
        elif tag == "insert":
            changed.add(i1)
    return changed


_BEFORE = b"import torch\n\nmodel = Net()\nopt = Adam()\n\nfor x in data:\n    loss = f(x)\n" \
          b"    loss.backward()\n    opt.step()\n\ntorch.save(model)\n"


@pytest.mark.parametrize(("after", "changed"), [
    # an insertion inside a paragraph follows its line; a line replaced is that line
    (_BEFORE.replace(b"    opt.step()\n", b"    scaler.step(opt)\n    scaler.update()\n"), {9}),
    (_BEFORE.replace(b"loss.backward()", b"scaler.scale(loss).backward()"), {8}),
    # a paragraph inserted, at the top and between two: after the last line before it
    (b"import amp\n\n" + _BEFORE, {0}),
    (_BEFORE.replace(b"opt = Adam()\n", b"opt = Adam()\n\nscaler = GradScaler()\n"), {4}),
    # a paragraph removed, a whole paragraph rewritten, the file's last line changed
    (_BEFORE.replace(b"import torch\n\n", b""), {1}),
    (_BEFORE.replace(b"model = Net()\nopt = Adam()\n", b"model = Net().half()\n"), {3, 4}),
    (_BEFORE.replace(b"torch.save(model)\n", b"torch.save(model, 'm.pt')\n"), {11}),
])
def test_changed_lines_match_paragraphs_then_lines_as_one_match_of_every_line_would(
    after: bytes, changed: set[int]
) -> None:
    blank = {n for n, line in enumerate(_BEFORE.splitlines(), 1) if not line.strip()}
    assert changed_lines(_BEFORE, after) == changed == _every_line_diff(_BEFORE, after) - blank
    assert changed_lines(_BEFORE, _BEFORE) == set()
