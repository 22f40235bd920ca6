"""amprewrite never breaks a user's code: static only, atomic under interruption, no crash on
real code, a clear outcome for every kind of bad input."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from amprewrite import cli
from amprewrite.engine import RewriteError, rewrite_source
from amprewrite.options import Options
from tests.test_cli import TRAINING

SIDE_EFFECTS = b"""import pathlib
import torch
pathlib.Path(%r).write_text("imported!")
raise SystemExit("amprewrite ran me")

model = torch.nn.Linear(2, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss = model(torch.randn(3, 2)).sum()
loss.backward()
optimizer.step()
"""


def test_the_codemod_never_imports_or_runs_the_script(tmp_path: Path) -> None:
    marker = tmp_path / "marker.txt"
    script = tmp_path / "train.py"
    script.write_bytes(SIDE_EFFECTS % str(marker).encode())
    result = subprocess.run([sys.executable, "-m", "amprewrite", str(script)],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 1, result.stderr
    assert not marker.exists()
    assert b"scaler.scale(loss).backward()" in script.read_bytes()


def test_the_codemod_does_not_import_torch() -> None:
    """Not at start-up, not with every rule module loaded (their examples mention torch as
    text only), not while rewriting."""
    code = ("import sys, amprewrite.cli, amprewrite.engine, amprewrite.code_index\n"
            "from amprewrite.options import Options\n"
            "amprewrite.code_index.codes()\n"
            "amprewrite.engine.rewrite_source(b'import torch\\nloss.backward()\\n', Options())\n"
            "print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False"


def _default_sigint() -> None:
    """Background jobs of a non-interactive shell start with SIGINT ignored; the child must
    see it as a user's Ctrl-C would be seen."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGKILL])
def test_an_interrupted_run_leaves_each_file_original_or_rewritten(
    tmp_path: Path, signal_number: int
) -> None:
    expected = rewrite_source(TRAINING, Options()).source
    files = []
    for index in range(600):
        path = tmp_path / f"train_{index:03d}.py"
        path.write_bytes(TRAINING + b"# %d\n" % index)
        files.append(path)
    process = subprocess.Popen([sys.executable, "-m", "amprewrite", "--jobs", "1", "-q",
                                str(tmp_path)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, preexec_fn=_default_sigint)
    deadline = time.monotonic() + 180  # a loaded machine starts Python slowly
    while time.monotonic() < deadline and b"scaler" not in files[0].read_bytes():
        time.sleep(0.005)
    assert b"scaler" in files[0].read_bytes(), "the run never started rewriting"
    process.send_signal(signal_number)
    process.wait(timeout=60)
    rewritten = 0
    for index, path in enumerate(files):
        data = path.read_bytes()
        suffix = b"# %d\n" % index
        assert data in (TRAINING + suffix, expected + suffix), path
        rewritten += data == expected + suffix
    assert 0 < rewritten < len(files), "the run was not interrupted midway"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def _sample(root: Path, count: int) -> list[Path]:
    files = sorted(p for p in root.rglob("*.py")
                   if "site-packages" not in p.relative_to(root).parts)
    return files[:: max(1, len(files) // count)][:count]


@pytest.mark.slow
@pytest.mark.parametrize(
    "root", [Path(torch.__file__).parent, Path(sysconfig.get_paths()["stdlib"])],
    ids=["torch", "stdlib"],
)
def test_real_code_never_crashes_and_untouched_files_come_back_identical(root: Path) -> None:
    for path in _sample(root, 120):
        source = path.read_bytes()
        try:
            result = rewrite_source(source, Options())
        except RewriteError as exc:  # a clear finding (e.g. Python 2 test data), never a crash
            assert exc.finding.code in ("AMP003", "AMP004"), path
            continue
        if result.changed:
            compile(result.source, str(path), "exec")
        else:
            assert result.source == source, path


def test_a_very_long_file_is_rewritten(tmp_path: Path) -> None:
    filler = b"".join(b"def helper_%d(x):\n    return x + %d\n\n\n" % (i, i) for i in range(3000))
    result = rewrite_source(filler + TRAINING, Options())
    assert result.changed and filler in result.source
    compile(result.source, "long.py", "exec")


def test_an_empty_file_is_left_alone() -> None:
    result = rewrite_source(b"", Options())
    assert not result.changed and result.source == b""


@pytest.mark.skipif(os.name != "posix", reason="POSIX signals")
def test_sigint_exits_without_a_traceback(tmp_path: Path) -> None:
    for index in range(200):
        (tmp_path / f"t{index}.py").write_bytes(TRAINING)
    process = subprocess.Popen([sys.executable, "-m", "amprewrite", "--jobs", "1", str(tmp_path)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=_default_sigint)
    time.sleep(1.5)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert "Traceback" not in err
    assert process.returncode == 130, err  # not 1, which says that files were rewritten
    assert err.rstrip().endswith("amprewrite: interrupted; each file is as it was or "
                                 "completely rewritten")


@pytest.mark.skipif(os.name != "posix", reason="POSIX pipes")
def test_a_reader_that_stops_early_ends_the_run_quietly(tmp_path: Path) -> None:
    """`amprewrite --diff . | head -1`: no "internal error", exit 141 as for SIGPIPE. The diffs
    (about 660 bytes a file) must overflow the pipe's buffer (64 KB), or the run could finish
    writing before the reader closes: 160 files."""
    for index in range(160):
        (tmp_path / f"t{index}.py").write_bytes(TRAINING)
    process = subprocess.Popen([sys.executable, "-m", "amprewrite", "--diff", str(tmp_path)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.readline()
    process.stdout.close()  # as `head -1` does
    err = process.stderr.read().decode()
    assert process.wait(timeout=60) == 141, err
    assert "internal error" not in err and "Traceback" not in err


@pytest.mark.parametrize(("raised", "code", "message"), [
    (KeyboardInterrupt(), 130, "amprewrite: interrupted; each file is as it was"),
    (KeyError("boom"), 123, "amprewrite: internal error (KeyError: 'boom'); please report it"),
])
def test_a_crash_or_ctrl_c_outside_any_file_does_not_exit_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raised: BaseException, code: int,
    message: str,
) -> None:
    (tmp_path / "train.py").write_bytes(TRAINING)

    def crash(*args: object, **kwargs: object) -> None:
        raise raised

    monkeypatch.setattr(cli, "run_files", crash)
    result = CliRunner().invoke(cli.main, [str(tmp_path)])
    assert result.exit_code == code
    assert message in result.output
    assert "Traceback" not in result.output


_TRAINS = TRAINING + b"%s\n"


@pytest.mark.parametrize(("line", "col", "message"), [
    (b"return loss", 1, "'return' outside function"),
    (b"def f(a, a):\n    pass", 10, "duplicate argument 'a' in function definition"),
    (b"print(sep='', sep=' ')", 15, "keyword argument repeated: sep"),
])
def test_a_file_the_compiler_refuses_is_amp003_at_its_line(
    line: bytes, col: int, message: str
) -> None:
    """CPython's parser accepts these, its compiler refuses them: the user's error, where the
    user wrote it, not an internal error of the rewrite at 1:1."""
    with pytest.raises(RewriteError) as raised:
        rewrite_source(_TRAINS % line, Options())
    finding = raised.value.finding
    assert (finding.code, finding.line, finding.col) == ("AMP003", TRAINING.count(b"\n") + 1, col)
    assert finding.message == f"cannot compile: {message}; file left unchanged"


def test_every_package_is_installed() -> None:
    """A subpackage missing from pyproject's list installs a command that cannot start (the
    pre-commit hooks install the project like any user)."""
    import tomllib

    root = Path(__file__).resolve().parent.parent
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    runtime = root / "runtime"
    found = {".".join(p.parent.relative_to(root).parts)
             for p in root.glob("amprewrite/**/__init__.py")}
    found |= {".".join(p.parent.relative_to(runtime).parts)
              for p in runtime.glob("amprewrite_runtime/**/__init__.py")}
    assert found == set(setuptools["packages"])


def test_the_users_syntax_warnings_are_not_printed() -> None:
    """`if step is 0:` makes CPython warn when the rewrite compiles the input and the output:
    the warning is about the user's code, not the rewrite, and is not amprewrite's to print."""
    source = TRAINING.replace(b"for step in range(3):\n",
                              b"for step in range(3):\n    if step is 0:\n        continue\n")
    assert source != TRAINING
    result = subprocess.run(
        [sys.executable, "-W", "always", "-c",
         "import sys; from amprewrite.engine import rewrite_source; "
         "from amprewrite.options import Options; "
         "print(rewrite_source(sys.stdin.buffer.read(), Options()).changed)"],
        input=source, capture_output=True, check=True)
    assert result.stdout.strip() == b"True"
    assert b"SyntaxWarning" not in result.stderr, result.stderr.decode()
