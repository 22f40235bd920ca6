"""Every file has a budget: a source over `MAX_SOURCE_BYTES` is left alone unread, and a
pathologically deep one gets a finding in seconds, not minutes nor an internal error."""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from amprewrite import budget, engine
from amprewrite.cli import main
from amprewrite.engine import RewriteError, rewrite_source
from amprewrite.options import Options
from amprewrite.project import rewrite
from amprewrite.runner import Status, process_file, process_source

PROJECTS = Path(__file__).parent.parent / "fixtures" / "projects"
HEAD = (b"import torch\nmodel = torch.nn.Linear(2, 2)\n"
        b"optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n")


def _training(loss: bytes, depth: int = 1) -> bytes:
    """A training step whose loss is `loss`, inside `depth` nested loops."""
    body = b"".join(b"    " * level + b"for i%d in range(2):\n" % level for level in range(depth))
    indent = b"    " * depth
    return HEAD + body + b"".join(indent + line + b"\n" for line in (
        b"loss = " + loss, b"loss.backward()", b"optimizer.step()"))


def test_a_source_over_the_size_limit_is_left_alone_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "train.py"
    source = _training(b"model(x).sum()")
    path.write_bytes(source)
    monkeypatch.setattr(engine, "MAX_SOURCE_BYTES", len(source) - 1)
    monkeypatch.setattr(engine, "cst", None)  # never parsed
    outcome = process_file(path, Options(), write=True, explicit=True)
    assert outcome.status is Status.UNCHANGED and path.read_bytes() == source
    [finding] = outcome.findings
    assert (finding.code, finding.line) == ("AMP008", 1)
    assert finding.message.endswith(" MB limit; file left unchanged")
    assert process_source("-", source, Options(), explicit=True).findings == [finding]


def test_the_size_limit_is_5_mb() -> None:
    assert engine.MAX_SOURCE_BYTES == 5 * 2**20
    huge = _training(b"model(x).sum()") + b"# padding\n" * (engine.MAX_SOURCE_BYTES // 10)
    result = rewrite_source(huge, Options())
    assert not result.changed and [f.code for f in result.findings] == ["AMP008"]


def test_a_5000_term_loss_is_refused_in_seconds() -> None:
    """libcst's parser takes minutes over it (quadratic in the depth of a left-recursive
    chain); CPython's compiler, run first, refuses it at once."""
    started = time.monotonic()
    with pytest.raises(RewriteError, match="source too deeply nested"):
        rewrite_source(_training(b" + ".join([b"model(x).sum()"] * 5000)), Options())
    assert time.monotonic() - started < 10


def test_twenty_nested_loops_are_a_clear_finding_not_an_internal_error() -> None:
    with pytest.raises(RewriteError) as raised:
        rewrite_source(_training(b"model(x).sum()", depth=20), Options())
    finding = raised.value.finding
    assert finding.code == "AMP004" and "internal error" not in finding.message
    assert finding.message == ("the rewrite would nest blocks deeper than Python allows (20: a "
                               "`with autocast()` in 20 loops); file left unchanged")
    assert rewrite_source(_training(b"model(x).sum()", depth=19), Options()).changed


_CHAINS = {  # expressions `depth` deep in libcst's tree
    "sum": lambda depth: b" + ".join([b"model(x).sum()"] * depth),
    "boolean": lambda depth: b" and ".join([b"model(x).sum()"] * depth),
    "attributes": lambda depth: b"model(x)" + b".sum()" * depth,
    "conditional": lambda depth: b" if c else ".join([b"model(x).sum()"] * depth),
    "unary": lambda depth: b"-" * depth + b"model(x).sum()",
}


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(sorted(_CHAINS)), st.integers(min_value=1, max_value=900))
def test_any_long_chain_is_rewritten_or_refused_with_a_finding(shape: str, depth: int) -> None:
    try:
        result = rewrite_source(_training(_CHAINS[shape](depth)), Options())
    except RewriteError as exc:
        assert exc.finding.code == "AMP004", exc.finding
        assert exc.finding.message == "source too deeply nested to analyse; file left unchanged"
    else:
        assert result.changed


def _slow_rewrite(source: bytes, options: Options) -> engine.RewriteResult:
    """A rewrite stuck in a pathological loop (fault injection)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pass
    raise AssertionError("the budget never ran out")


def test_a_rewrite_past_its_time_budget_is_abandoned_with_a_finding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(budget, "SECONDS_PER_FILE", 0.2)
    monkeypatch.setattr(engine, "rewrite_source", _slow_rewrite)
    path = tmp_path / "train.py"
    source = _training(b"model(x).sum()")
    path.write_bytes(source)
    started = time.monotonic()
    outcome = process_file(path, Options(), write=True, explicit=True)
    assert time.monotonic() - started < 10
    assert outcome.status is Status.UNCHANGED and path.read_bytes() == source
    assert [f.format("t.py") for f in outcome.findings] == [
        "t.py:1:1: AMP009 rewrite abandoned after 0.2 seconds of CPU time; file left unchanged"]
    assert signal.getsignal(signal.SIGPROF) is signal.SIG_DFL
    assert signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)


def test_the_budget_counts_cpu_time_not_the_clock_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rewrite that waits (a loaded machine: the process is not running) keeps its budget."""
    source = _training(b"model(x).sum()")
    rewritten = engine.rewrite_source(source, Options())  # before the budget starts
    monkeypatch.setattr(budget, "SECONDS_PER_FILE", 0.2)

    def waiting(source: bytes, options: Options) -> engine.RewriteResult:
        time.sleep(0.6)  # three budgets of the clock's time, almost none of the CPU's
        return rewritten

    monkeypatch.setattr(engine, "rewrite_source", waiting)
    path = tmp_path / "train.py"
    path.write_bytes(source)
    outcome = process_file(path, Options(), write=False, explicit=True)
    assert outcome.status is Status.CHANGED
    assert "AMP009" not in {f.code for f in outcome.findings}


def test_a_project_group_past_its_budget_is_left_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "project"
    shutil.copytree(PROJECTS / "trainer_receives_optimizer" / "input", work)
    before = {p.name: p.read_bytes() for p in work.glob("*.py")}
    monkeypatch.setattr(budget, "SECONDS_PER_FILE", 0.1)
    monkeypatch.setattr(rewrite, "link_group", lambda *args: _slow_rewrite(b"", Options()))
    result = CliRunner().invoke(main, [str(work)])
    assert result.exit_code == 0, result.output
    assert "AMP009 rewrite abandoned after 0.2 seconds of CPU time" in result.output
    assert {p.name: p.read_bytes() for p in work.glob("*.py")} == before


def test_a_check_that_gives_up_on_a_file_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--check` exits 123 when it abandoned a file (it was not checked, so it did not pass);
    a rewrite leaving the file as it was still exits 0."""
    monkeypatch.setattr(budget, "SECONDS_PER_FILE", 0.2)
    monkeypatch.setattr(engine, "rewrite_source", _slow_rewrite)
    path = tmp_path / "train.py"
    path.write_bytes(_training(b"model(x).sum()"))
    checked = CliRunner().invoke(main, ["--check", str(path)])
    assert checked.exit_code == 123 and "AMP009" in checked.output
    assert CliRunner().invoke(main, ["--check", "--exit-zero", str(path)]).exit_code == 123
    assert CliRunner().invoke(main, [str(path)]).exit_code == 0
