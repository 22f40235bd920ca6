"""The command line: exit codes, --diff/--check, stdin, bad input, discovery, reporting.

Most tests run against a fake engine (`fake_engine`) so that they pin the command line's
behaviour whatever the rewrite rules do; the end-to-end tests at the bottom run the real
engine on a small training script.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from amprewrite import __version__, engine
from amprewrite.cli import main
from amprewrite.engine import RewriteError, RewriteResult
from amprewrite.findings import Finding
from amprewrite.options import Options

TRAINING = b"""import torch
import torch.nn as nn
import torch.nn.functional as F

model = nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x = torch.randn(8, 4)
    y = torch.randint(0, 2, (8,))
    optimizer.zero_grad()
    out = model(x)
    loss = F.cross_entropy(out, y)
    loss.backward()
    optimizer.step()
"""
PLAIN_PYTHON = b"def add(a, b):\n    return a + b\n"

# Sources for the fake engine: what each one makes it do.
CHANGES = b"x = 1\nold()\ny = 2\n"  # rewritten: old() -> new(), one CHANGE finding
CLEAN = b"x = 1\n"  # nothing to do, no finding
NOTED = b"# NOTE\nx = 1\n"  # nothing to do, a NOTE finding (like AMP002)
SKIPPED = b"# SKIP\nx = 1\n"  # nothing to do, a SKIP finding
LINTED = b"# LINT\nx = 1\n"  # nothing to do, an AMP mistake left (a LINT finding, like AMP604)
BROKEN = b"# SYNTAX\nx = (\n"  # RewriteError(AMP003)
CRASHES = b"# CRASH\n"  # an unexpected exception inside the engine
UNPARSABLE_OUTPUT = b"# EMIT BROKEN\n"  # the engine returns code that does not parse


def fake_rewrite(source: bytes, options: Options) -> RewriteResult:
    """A stand-in engine with every kind of outcome, keyed by markers in the source."""
    if b"SYNTAX" in source:
        raise RewriteError(Finding("AMP003", 2, 5, "syntax error; file left unchanged"))
    if b"CRASH" in source:
        raise KeyError("boom")
    if b"EMIT BROKEN" in source:
        return RewriteResult(b"def broken(:\n", [], True)
    if b"EMIT TEXT" in source:
        return RewriteResult("x = 1\n", [], True)  # type: ignore[arg-type]  # a broken contract
    if b"UNREGISTERED" in source:
        return RewriteResult(source, [Finding("AMP999", 1, 1, "a code missing from CODES")])
    findings = []
    if b"NOTE" in source:
        findings.append(Finding("AMP002", 1, 1, "file already uses mixed precision"))
    if b"SKIP" in source:
        findings.append(Finding("AMP201", 2, 1, "backward without an optimizer step"))
    if b"LINT" in source:
        findings.append(Finding("AMP604", 2, 1, "backward runs inside an autocast region"))
    if b"old()" in source:
        findings.append(Finding("AMP102", 2, 1, "old() replaced"))
        findings.append(Finding("AMP101", 1, 1, "first line wrapped"))
        return RewriteResult(source.replace(b"old()", b"new()"), findings, True)
    return RewriteResult(source, findings, False)


@pytest.fixture
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "rewrite_source", fake_rewrite)


def _run(*args: str, stdin: bytes | None = None, color: bool = False) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), input=stdin, color=color)
    assert "Traceback" not in result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def _files(directory: Path, sources: dict[str, bytes]) -> list[Path]:
    """Write the files `{relative path: source}`; return their paths."""
    paths = []
    for name, source in sources.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(source)
        paths.append(path)
    return paths


@pytest.fixture
def training(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_bytes(TRAINING)
    return path


@pytest.fixture
def plain(tmp_path: Path) -> Path:
    path = tmp_path / "util.py"
    path.write_bytes(PLAIN_PYTHON)
    return path


# --- exit codes ----------------------------------------------------------------------------


@pytest.mark.usefixtures("fake_engine")
@pytest.mark.parametrize(
    ("sources", "flags", "expected"),
    [
        ([CLEAN], [], 0),
        ([NOTED, SKIPPED], [], 0),
        ([CHANGES], [], 1),
        ([CHANGES, CLEAN], [], 1),
        ([CHANGES], ["--exit-zero"], 0),
        ([CHANGES], ["--check"], 1),
        ([CHANGES], ["--diff"], 1),
        ([CHANGES], ["--diff", "--check"], 1),
        ([CHANGES], ["--check", "--exit-zero"], 0),
        ([CLEAN], ["--check"], 0),
        ([LINTED], [], 0),  # nothing was rewritten: a mistake left fails --check only
        ([LINTED], ["--diff"], 0),
        ([LINTED], ["--check"], 1),
        ([LINTED, CLEAN], ["--diff", "--check"], 1),
        ([LINTED], ["--check", "--exit-zero"], 0),
        ([BROKEN], [], 123),
        ([BROKEN, CHANGES], [], 123),
        ([CHANGES, BROKEN], ["--exit-zero"], 123),
        ([CHANGES, BROKEN], ["--check"], 123),
        ([CRASHES, CLEAN], [], 123),
        ([UNPARSABLE_OUTPUT], [], 123),
        ([UNPARSABLE_OUTPUT], ["--check"], 1),  # nothing is written, so nothing is re-parsed
    ],
)
def test_exit_code_matrix(
    tmp_path: Path, sources: list[bytes], flags: list[str], expected: int
) -> None:
    paths = _files(tmp_path, {f"f{i}.py": source for i, source in enumerate(sources)})
    assert _run(*flags, *map(str, paths))[0] == expected


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--plain", "--opt-level", "O2"], "--plain emits torch.amp only, which has no O2/O3"),
        (["--plain", "--opt-level", "O3"], "(model casting and master weights need the runtime)"),
        (["-q", "-v"], "cannot be combined"),
        (["--opt-level", "O9"], "Invalid value for '--opt-level'"),
        (["--dtype", "float4"], "Invalid value for '--dtype'"),
        (["--no-such-option"], "No such option"),
    ],
)
def test_usage_errors_exit_2(plain: Path, flags: list[str], message: str) -> None:
    code, _, err = _run(*flags, str(plain))
    assert code == 2
    assert message in err
    assert plain.read_bytes() == PLAIN_PYTHON


def test_no_path_is_a_usage_error() -> None:
    code, _, err = _run()
    assert code == 2 and "Missing argument 'PATH...'" in err


def test_a_missing_path_is_a_usage_error_and_nothing_is_processed(
    tmp_path: Path, fake_engine: None
) -> None:
    [changes] = _files(tmp_path, {"a.py": CHANGES})
    code, _, err = _run(str(changes), str(tmp_path / "nope.py"))
    assert code == 2
    assert f"Error: no such file or directory: '{tmp_path / 'nope.py'}'" in err
    assert changes.read_bytes() == CHANGES


def test_an_empty_path_is_missing_not_the_current_directory(
    tmp_path: Path, fake_engine: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    [changes] = _files(tmp_path, {"a.py": CHANGES})
    monkeypatch.chdir(tmp_path)
    code, _, err = _run("")
    assert code == 2 and "no such file or directory: ''" in err
    assert changes.read_bytes() == CHANGES


def test_stdin_twice_is_a_usage_error() -> None:
    assert _run("-", "-", stdin=b"")[0] == 2


# --- writing, --diff, --check -------------------------------------------------------------


def test_changed_files_are_rewritten_in_place(tmp_path: Path, fake_engine: None) -> None:
    changes, clean = _files(tmp_path, {"a.py": CHANGES, "b.py": CLEAN})
    assert _run(str(changes), str(clean))[0] == 1
    assert changes.read_bytes() == CHANGES.replace(b"old()", b"new()")
    assert clean.read_bytes() == CLEAN


@pytest.mark.usefixtures("fake_engine")
@pytest.mark.parametrize("flags", [["--check"], ["--diff"], ["--diff", "--check"]])
def test_check_and_diff_leave_files_byte_identical(tmp_path: Path, flags: list[str]) -> None:
    [changes] = _files(tmp_path, {"a.py": CHANGES})
    os.utime(changes, ns=(1_000_000_000, 1_000_000_000))
    code, out, err = _run(*flags, str(changes))
    assert code == 1
    assert changes.read_bytes() == CHANGES
    assert changes.stat().st_mtime_ns == 1_000_000_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.py"]
    assert err.endswith("1 file would be rewritten\n")
    assert ("+new()" in out) == ("--diff" in flags)
    if "--diff" not in flags:
        assert out == ""


def test_diff_format(tmp_path: Path, fake_engine: None) -> None:
    changes, clean = _files(tmp_path, {"a.py": CHANGES, "b.py": CLEAN})
    _, out, _ = _run("--diff", str(changes), str(clean))
    assert out == (
        f"--- {changes}\n+++ {changes}\n"
        "@@ -1,3 +1,3 @@\n x = 1\n-old()\n+new()\n y = 2\n"
    )


def test_diff_is_coloured_only_on_a_terminal(tmp_path: Path, fake_engine: None) -> None:
    [changes] = _files(tmp_path, {"a.py": CHANGES})
    _, coloured, _ = _run("--diff", str(changes), color=True)
    assert f"\x1b[1m--- {changes}\x1b[0m\n\x1b[1m+++ {changes}\x1b[0m\n" in coloured
    assert "\x1b[31m-old()\x1b[0m\n" in coloured
    assert "\x1b[32m+new()\x1b[0m\n" in coloured
    assert "\x1b[" not in _run("--diff", str(changes))[1]


def test_diff_keeps_crlf_and_marks_a_missing_final_newline(
    tmp_path: Path, fake_engine: None
) -> None:
    [changes] = _files(tmp_path, {"a.py": b"x = 1\r\nold()"})
    result = CliRunner().invoke(main, ["--diff", str(changes)])
    out = result.stdout_bytes.decode()
    assert " x = 1\r\n-old()\n\\ No newline at end of file\n+new()\n\\ No newline" in out


def test_diff_decodes_with_the_coding_declaration(tmp_path: Path, fake_engine: None) -> None:
    [changes] = _files(tmp_path, {"a.py": b"# -*- coding: latin-1 -*-\nold()  # caf\xe9\n"})
    _, out, _ = _run("--diff", str(changes))
    assert "+new()  # café\n" in out


# --- standard input -----------------------------------------------------------------------


@pytest.mark.usefixtures("fake_engine")
@pytest.mark.parametrize("source", [CHANGES, CLEAN, b"", BROKEN, b"caf\xe9 = 1\r\n"])
def test_stdin_writes_the_whole_source_to_stdout(source: bytes) -> None:
    result = CliRunner().invoke(main, ["-"], input=source)
    assert result.stdout_bytes == source.replace(b"old()", b"new()")


def test_stdin_findings_use_dash_or_the_stdin_filename(fake_engine: None) -> None:
    assert "-:2:1: AMP102 old() replaced" in _run("-", stdin=CHANGES)[2]
    _, _, err = _run("--stdin-filename", "train.py", "-", stdin=CHANGES)
    assert "train.py:2:1: AMP102 old() replaced" in err
    assert "1 file rewritten" in err


def test_stdin_with_check_or_diff_writes_no_source(fake_engine: None) -> None:
    assert _run("--check", "-", stdin=CHANGES)[:2] == (1, "")
    code, out, _ = _run("--diff", "--stdin-filename", "t.py", "-", stdin=CHANGES)
    assert code == 1 and out.startswith("--- t.py\n+++ t.py\n") and "+new()" in out


# --- bad input ------------------------------------------------------------------------------


def test_a_bad_file_fails_alone(tmp_path: Path, fake_engine: None) -> None:
    a, b, c = _files(tmp_path, {"a.py": CHANGES, "b.py": BROKEN, "c.py": CHANGES})
    code, _, err = _run(str(tmp_path))
    assert code == 123
    assert f"{b}:2:5: AMP003 syntax error; file left unchanged" in err
    assert a.read_bytes() == c.read_bytes() == CHANGES.replace(b"old()", b"new()")
    assert b.read_bytes() == BROKEN
    assert err.endswith("2 files rewritten, 1 file failed\n")


def test_an_internal_error_becomes_a_finding(tmp_path: Path, fake_engine: None) -> None:
    crash, changes = _files(tmp_path, {"a.py": CRASHES, "b.py": CHANGES})
    code, _, err = _run(str(crash), str(changes))
    assert code == 123
    assert f"{crash}:1:1: AMP004 internal error (KeyError: 'boom'); file left unchanged" in err
    assert b"new()" in changes.read_bytes()


def test_output_that_does_not_parse_is_never_written(tmp_path: Path, fake_engine: None) -> None:
    [path] = _files(tmp_path, {"a.py": UNPARSABLE_OUTPUT})
    code, _, err = _run(str(path))
    assert code == 123
    assert "AMP004 internal error: the rewritten source does not parse" in err
    assert path.read_bytes() == UNPARSABLE_OUTPUT
    assert [p.name for p in tmp_path.iterdir()] == ["a.py"]


def test_an_engine_breaking_its_contract_costs_one_file(
    tmp_path: Path, fake_engine: None
) -> None:
    text, unregistered, _ = _files(
        tmp_path, {"a.py": b"# EMIT TEXT\n", "b.py": b"# UNREGISTERED\n", "c.py": CHANGES})
    code, out, err = _run("--diff", str(tmp_path))
    assert code == 123
    assert f"{text}:1:1: AMP004 internal error (TypeError: the engine returned str" in err
    assert f"{unregistered}:1:1: AMP999 a code missing from CODES" in err
    assert "+new()" in out


def test_a_broken_symlink_found_by_walking_cannot_be_read(tmp_path: Path) -> None:
    (tmp_path / "gone.py").symlink_to(tmp_path / "missing.py")
    code, _, err = _run(str(tmp_path))
    assert code == 123
    assert f"{tmp_path / 'gone.py'}:1:1: AMP004 cannot read: no such file or directory" in err


def test_a_fifo_is_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    code, _, err = _run(str(fifo))
    assert code == 123 and "AMP004 cannot read: not a regular file" in err


def test_a_binary_file_is_reported(tmp_path: Path) -> None:
    [binary] = _files(tmp_path, {"data.bin": b"\x7fELF\x00\x01\x02"})
    code, _, err = _run(str(binary))
    assert code == 123 and f"{binary}:1:1: AMP004 binary file" in err


def test_non_utf8_without_a_coding_declaration_fails_clearly(tmp_path: Path) -> None:
    latin = tmp_path / "latin.py"
    latin.write_bytes(b'name = "caf\xe9"\n')
    code, _, err = _run(str(latin))
    assert code == 123
    assert f"{latin}:1:1: AMP004 cannot decode" in err
    assert latin.read_bytes() == b'name = "caf\xe9"\n'


def test_read_only_file_is_left_alone(tmp_path: Path, fake_engine: None) -> None:
    [path] = _files(tmp_path, {"a.py": CHANGES})
    path.chmod(0o444)
    code, _, err = _run(str(path))
    assert code == 123
    assert f"{path}:1:1: AMP004 cannot write: permission denied (read-only file)" in err
    assert path.read_bytes() == CHANGES


# --- discovery ------------------------------------------------------------------------------


def test_directory_walk_is_sorted_and_skips_environments(
    tmp_path: Path, fake_engine: None
) -> None:
    walked = ["a/y.py", "a/z.py", "a.py", "b.py", "env/e.py", "pkg/sub/m.py"]
    skipped = [".hidden/h.py", ".venv/v.py", "venv/v.py", ".tox/t.py", "build/b.py",
               "dist/d.py", "node_modules/n.py", ".git/g.py", "pkg/__pycache__/c.py",
               "lib/site-packages/s.py", "x.egg-info/e.py", "myenv/lib/m.py", "notes.txt"]
    for relative in walked + skipped:
        _files(tmp_path, {relative: CLEAN})
    (tmp_path / "myenv" / "pyvenv.cfg").write_text("home = /usr\n")
    _, _, err = _run("-v", str(tmp_path))
    shown = [line.removesuffix(": left unchanged") for line in err.splitlines()[:-1]]
    assert shown == [str(tmp_path / p) for p in walked]


def test_explicit_paths_are_processed_whatever_their_name(
    tmp_path: Path, fake_engine: None
) -> None:
    script, hidden = _files(tmp_path, {"bin/train": CHANGES, "build/gen.py": CHANGES})
    assert _run(str(script), str(hidden))[0] == 1
    assert b"new()" in script.read_bytes() and b"new()" in hidden.read_bytes()


def test_an_excluded_directory_named_explicitly_is_walked(
    tmp_path: Path, fake_engine: None
) -> None:
    [path] = _files(tmp_path, {"build/gen.py": CLEAN})
    assert str(path) in _run("-v", str(tmp_path / "build"))[2]


def test_a_file_reached_twice_is_processed_once(tmp_path: Path, fake_engine: None) -> None:
    [path] = _files(tmp_path, {"a.py": NOTED})
    _, _, err = _run(str(tmp_path), str(path), str(path))
    assert err == f"{path}:1:1: AMP002 file already uses mixed precision\n1 file left unchanged\n"


# --- reporting ------------------------------------------------------------------------------


def _all_kinds(directory: Path) -> tuple[Path, ...]:
    sources = {"c.py": CHANGES, "b.py": BROKEN, "s.py": SKIPPED, "n.py": NOTED}
    return tuple(_files(directory, sources))


def test_default_reporting_sorted_by_path_then_line(tmp_path: Path, fake_engine: None) -> None:
    c, b, s, n = _all_kinds(tmp_path)
    _, _, err = _run(str(s), str(c), str(b), str(tmp_path / "n.py"))
    assert err.splitlines() == [
        f"{b}:2:5: AMP003 syntax error; file left unchanged",
        f"{c}:1:1: AMP101 first line wrapped",
        f"{c}:2:1: AMP102 old() replaced",
        f"{n}:1:1: AMP002 file already uses mixed precision",  # named explicitly: its note is shown
        f"{s}:2:1: AMP201 backward without an optimizer step",
        "1 file rewritten, 2 files left unchanged, 1 file failed",
    ]


def test_notes_for_walked_files_only_when_verbose(tmp_path: Path, fake_engine: None) -> None:
    _all_kinds(tmp_path)
    assert "AMP002" not in _run("--check", str(tmp_path))[2]
    assert "AMP002" in _run("--check", "-v", str(tmp_path))[2]


def test_verbose_adds_notes_and_each_file_status(tmp_path: Path, fake_engine: None) -> None:
    c, b, s, n = _all_kinds(tmp_path)
    _, _, err = _run("-v", "--check", str(tmp_path))
    assert err.splitlines() == [
        f"{b}:2:5: AMP003 syntax error; file left unchanged",
        f"{b}: failed",
        f"{c}:1:1: AMP101 first line would be wrapped",  # nothing written: conditional
        f"{c}:2:1: AMP102 old() would be replaced",
        f"{c}: would be rewritten",
        f"{n}:1:1: AMP002 file already uses mixed precision",
        f"{n}: would be left unchanged",
        f"{s}:2:1: AMP201 backward without an optimizer step",
        f"{s}: would be left unchanged",
        f"to apply these changes: amprewrite {c}",  # the file that would change
        "1 file would be rewritten, 2 files would be left unchanged, 1 file failed",
    ]


def test_quiet_prints_errors_only(tmp_path: Path, fake_engine: None) -> None:
    _, b, _, _ = _all_kinds(tmp_path)
    code, _, err = _run("-q", str(tmp_path))
    assert code == 123
    assert err == f"{b}:2:5: AMP003 syntax error; file left unchanged\n"


def test_summary_counts_and_plurals(tmp_path: Path, fake_engine: None) -> None:
    _files(tmp_path, {"a.py": CHANGES, "b.py": CHANGES, "c.py": CLEAN})
    assert _run("--check", str(tmp_path))[2].endswith(
        "2 files would be rewritten, 1 file would be left unchanged\n")
    assert _run(str(tmp_path))[2].endswith("2 files rewritten, 1 file left unchanged\n")
    assert _run(str(tmp_path))[2].endswith("3 files left unchanged\n")


def test_an_empty_directory_has_nothing_to_do(tmp_path: Path) -> None:
    assert _run(str(tmp_path)) == (0, "", "no Python files found; nothing to do\n")


def test_version() -> None:
    assert _run("--version") == (0, f"amprewrite {__version__}\n", "")


def test_python_dash_m_version() -> None:
    result = subprocess.run([sys.executable, "-m", "amprewrite", "--version"],
                            capture_output=True, text=True, check=False)
    assert (result.returncode, result.stdout) == (0, f"amprewrite {__version__}\n")


# --- end to end, with the real engine -----------------------------------------------------


def test_rewrite_in_place_exits_1_then_0(training: Path) -> None:
    code, _, err = _run(str(training))
    assert code == 1
    rewritten = training.read_bytes()
    assert b"from amprewrite_runtime import GradScaler, autocast\n" in rewritten
    assert b"    with autocast():\n        out = model(x)\n" in rewritten
    assert b"scaler.scale(loss).backward()\n    scaler.step(optimizer)\n" in rewritten
    assert f"{training}:13:5: AMP102" in err and err.endswith("1 file rewritten\n")
    compile(rewritten, str(training), "exec")
    code, _, err = _run(str(training))
    assert code == 0 and "AMP002" in err
    assert training.read_bytes() == rewritten


def test_nothing_to_change_exits_0_with_a_note_when_verbose(plain: Path) -> None:
    code, _, err = _run(str(plain))
    assert code == 0
    assert plain.read_bytes() == PLAIN_PYTHON
    assert err == "1 file left unchanged\n"  # pre-commit names every staged file: no noise
    assert f"{plain}:1:1: AMP001" in _run("-v", str(plain))[2]


def test_exit_zero_opts_out_of_exit_1(training: Path) -> None:
    assert _run("--exit-zero", str(training))[0] == 0
    assert b"scaler.scale(loss)" in training.read_bytes()


@pytest.mark.parametrize("flags", [["--check"], ["--diff"], ["--check", "--diff"]])
def test_check_and_diff_write_nothing(training: Path, flags: list[str]) -> None:
    stat = training.stat()
    code, out, err = _run(*flags, str(training))
    assert code == 1
    assert training.read_bytes() == TRAINING
    assert training.stat().st_mtime_ns == stat.st_mtime_ns
    assert "would be rewritten" in err
    assert ("+    scaler.scale(loss).backward()" in out) == ("--diff" in flags)


def test_stdin_to_stdout() -> None:
    code, out, err = _run("-", stdin=TRAINING)
    assert code == 1
    assert "scaler.scale(loss).backward()" in out
    assert "-:13:5: AMP102" in err


def test_syntax_error_is_reported_and_the_other_files_still_processed(
    tmp_path: Path, training: Path
) -> None:
    broken = tmp_path / "broken.py"
    broken.write_bytes(b"import torch\nx = (\n")
    code, _, err = _run(str(broken), str(training))
    assert code == 123
    assert f"{broken}:2:5: AMP003 cannot parse: '(' was never closed; file left unchanged" in err
    assert b"scaler.scale(loss)" in training.read_bytes()
    assert broken.read_bytes() == b"import torch\nx = (\n"


def test_latin1_with_a_coding_declaration_round_trips(tmp_path: Path) -> None:
    latin = tmp_path / "latin.py"
    source = b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + TRAINING
    latin.write_bytes(source)
    assert _run(str(latin))[0] == 1
    rewritten = latin.read_bytes()
    assert rewritten.startswith(b"# -*- coding: latin-1 -*-\n# caf\xe9\n")
    assert b"scaler.scale(loss)" in rewritten


def test_python_dash_m_entry_point(training: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "amprewrite", "--check", str(training)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 1, result.stderr
    assert "AMP102" in result.stderr


@pytest.mark.parametrize(
    ("flags", "explanation"),
    [
        (["--opt-level", "O1", "--master-weights"], "FP32 master weights make no sense"),
        (["--opt-level", "O1", "--keep-batchnorm-fp32"], "does not apply"),
        (["--opt-level", "O1", "--no-keep-batchnorm-fp32"], "does not apply"),
        (["--opt-level", "O0", "--loss-scale", "128"], "O0 is pure FP32"),
        (["--opt-level", "O0", "--loss-scale", "dynamic"], "O0 is pure FP32"),
        (["--opt-level", "O0", "--master-weights"], "O0 is pure FP32"),
        (["--opt-level", "O0", "--keep-batchnorm-fp32"], "O0 is pure FP32"),
        (["--opt-level", "O0", "--dtype", "float16"], "O0 is pure FP32"),
        (["--plain", "--opt-level", "O2"], "has no O2/O3"),
        (["--plain", "--opt-level", "O3"], "has no O2/O3"),
        (["--plain", "--loss-scale", "64"], "dynamic loss scaling only"),
        (["--loss-scale", "-1"], "must be positive"),
        (["--loss-scale", "lots"], "'dynamic' or a positive number"),
        (["--dtype", "float8", "--plain"], "float8 training is O1 with the runtime"),
        (["--dtype", "float8", "--opt-level", "O2"], "float8 training is O1 with the runtime"),
    ],
)
def test_invalid_opt_level_combinations_are_refused(
    training: Path, flags: list[str], explanation: str
) -> None:
    code, _, err = _run(*flags, str(training))
    assert code == 2
    assert explanation in err
    assert training.read_bytes() == TRAINING


@pytest.mark.parametrize(
    ("flags", "constructor"),
    [
        (["--opt-level", "O2"], 'GradScaler("O2")'),
        (["--opt-level", "O3", "--keep-batchnorm-fp32"],
         'GradScaler("O3", keep_batchnorm_fp32=True)'),
        (["--opt-level", "O2", "--no-master-weights", "--loss-scale", "512"],
         'GradScaler("O2", master_weights=False, loss_scale=512.0)'),
        (["--loss-scale", "128"], "GradScaler(loss_scale=128.0)"),
        (["--dtype", "float16"], 'GradScaler(dtype="float16")'),
        (["--dtype", "float8"], 'GradScaler(dtype="bfloat16")'),
    ],
)
def test_opt_level_properties_reach_the_scaler(
    training: Path, flags: list[str], constructor: str
) -> None:
    assert _run(*flags, str(training))[0] == 1
    rewritten = training.read_text()
    assert f"scaler = {constructor}\n" in rewritten
    assert ("scaler.initialize(model, optimizer)" in rewritten) == ("O2" in flags or "O3" in flags)
    assert ("model = float8_training(model)\n" in rewritten) == ("float8" in flags)


def test_float8_from_the_configuration_converts_the_model(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.amprewrite]\ndtype = "float8"\n')
    [training] = _files(tmp_path, {"train.py": TRAINING})
    code, _, err = _run(str(training))
    assert code == 1 and "AMP180" in err
    rewritten = training.read_text()
    assert "model = nn.Linear(4, 2)\nmodel = float8_training(model)\n" in rewritten
    assert 'with autocast(dtype="bfloat16"):' in rewritten
