"""Writes are atomic, keep mode, encoding, BOM and newlines, and never write broken code."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from amprewrite import engine, fileio
from amprewrite.engine import RewriteResult
from amprewrite.fileio import ChangedOnDisk, UnparsableOutput, read_source, write_atomically
from amprewrite.options import Options
from amprewrite.runner import Status, process_file
from tests.test_cli import TRAINING

NEW = b"x = 2\n"


@pytest.fixture
def path(tmp_path: Path) -> Path:
    target = tmp_path / "train.py"
    target.write_bytes(b"x = 1\n")
    return target


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize("mode", [0o755, 0o644, 0o600, 0o664])
def test_mode_is_kept(path: Path, mode: int) -> None:
    path.chmod(mode)
    write_atomically(path, NEW)
    assert path.read_bytes() == NEW
    assert stat.S_IMODE(path.stat().st_mode) == mode


def test_the_file_is_replaced_by_a_rename_and_no_temporary_file_is_left(path: Path) -> None:
    inode = path.stat().st_ino
    write_atomically(path, NEW)
    assert path.stat().st_ino != inode  # a new file renamed over the old one
    assert _names(path.parent) == ["train.py"]


def test_the_data_is_fsynced_before_the_rename(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(descriptor: int) -> None:
        events.append("fsync")
        real_fsync(descriptor)

    def replace(source: str, target: str) -> None:
        events.append("replace")
        real_replace(source, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write_atomically(path, NEW)
    assert events[:2] == ["fsync", "replace"]


def test_a_failed_rename_leaves_the_file_and_no_temporary_file(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(source: str, target: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="No space left"):
        write_atomically(path, NEW)
    assert path.read_bytes() == b"x = 1\n"
    assert _names(path.parent) == ["train.py"]


def test_a_failed_write_is_reported_for_that_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    train = tmp_path / "train.py"
    train.write_bytes(TRAINING)

    def refuse(source: str, target: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    outcome = process_file(train, Options(), write=True, explicit=True)
    assert outcome.status is Status.FAILED
    assert outcome.findings[-1].format("p") == (
        "p:1:1: AMP004 cannot write: no space left on device; file left unchanged")
    assert train.read_bytes() == TRAINING
    assert _names(tmp_path) == ["train.py"]


def test_broken_output_is_never_written(path: Path) -> None:
    with pytest.raises(UnparsableOutput, match="does not parse"):
        write_atomically(path, b"def broken(:\n")
    assert path.read_bytes() == b"x = 1\n"
    assert _names(path.parent) == ["train.py"]


def test_a_read_only_file_is_refused_even_for_root(path: Path) -> None:
    path.chmod(0o444)
    with pytest.raises(PermissionError, match="permission denied"):
        write_atomically(path, NEW)
    assert path.read_bytes() == b"x = 1\n"
    assert _names(path.parent) == ["train.py"]


def test_a_file_changed_meanwhile_is_not_overwritten(path: Path) -> None:
    with pytest.raises(ChangedOnDisk, match="changed on disk"):
        write_atomically(path, NEW, expected=b"x = 0\n")
    assert path.read_bytes() == b"x = 1\n"
    write_atomically(path, NEW, expected=b"x = 1\n")
    assert path.read_bytes() == NEW


def test_an_edit_made_while_rewriting_wins(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def rewrite_slowly(source: bytes, options: Options) -> RewriteResult:
        path.write_bytes(b"x = 'edited meanwhile'\n")  # an editor saves during the rewrite
        return RewriteResult(NEW, [], True)

    monkeypatch.setattr(engine, "rewrite_source", rewrite_slowly)
    outcome = process_file(path, Options(), write=True, explicit=True)
    assert outcome.status is Status.FAILED
    assert "AMP004 not written: the file changed on disk" in outcome.findings[-1].format("p")
    assert path.read_bytes() == b"x = 'edited meanwhile'\n"


def test_a_symlink_is_written_through(tmp_path: Path) -> None:
    target = tmp_path / "real.py"
    target.write_bytes(TRAINING)
    link = tmp_path / "link.py"
    link.symlink_to(target)
    assert process_file(link, Options(), write=True, explicit=True).status is Status.CHANGED
    assert link.is_symlink() and link.resolve() == target
    assert b"scaler.scale(loss)" in target.read_bytes()
    assert _names(tmp_path) == ["link.py", "real.py"]


def test_read_source_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        read_source(fifo)
    with pytest.raises(FileNotFoundError):
        read_source(tmp_path / "missing.py")


def test_temporary_files_are_hidden_and_named_for_the_tool(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    real_replace = os.replace

    def replace(source: str, target: str) -> None:
        seen.append(source)
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", replace)
    write_atomically(path, NEW)
    [temporary] = seen
    assert Path(temporary).parent == path.parent
    assert Path(temporary).name.startswith(".train.py.")
    assert temporary.endswith(fileio.TEMPORARY_SUFFIX)


# --- through the real engine: bytes other than the rewrite are kept ------------------------


def test_mode_is_kept_and_no_temporary_file_is_left(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_bytes(TRAINING)
    path.chmod(0o755)
    assert process_file(path, Options(), write=True, explicit=True).status is Status.CHANGED
    assert stat.S_IMODE(path.stat().st_mode) == 0o755
    assert _names(tmp_path) == ["train.py"]


@pytest.mark.parametrize(
    "transform",
    [
        pytest.param(lambda s: s.replace(b"\n", b"\r\n"), id="crlf"),
        pytest.param(lambda s: b"\xef\xbb\xbf" + s, id="bom"),
        pytest.param(lambda s: b"\xef\xbb\xbf" + s.replace(b"\n", b"\r\n"), id="bom-crlf"),
        pytest.param(lambda s: s.replace(b"    ", b"\t"), id="tabs"),
        pytest.param(lambda s: b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + s, id="latin-1"),
    ],
)
def test_encoding_bom_newlines_and_indentation_are_kept(tmp_path: Path, transform) -> None:
    path = tmp_path / "train.py"
    source = transform(TRAINING)
    path.write_bytes(source)
    process_file(path, Options(), write=True, explicit=True)
    rewritten = path.read_bytes()
    assert b"scaler.scale(loss)" in rewritten
    bom = source.startswith(b"\xef\xbb\xbf")
    assert rewritten.startswith(b"\xef\xbb\xbf") == bom
    assert rewritten.count(b"\xef\xbb\xbf") == int(bom)
    if b"\r\n" in source:
        assert rewritten.count(b"\n") == rewritten.count(b"\r\n")
    if b"\t" in source:
        assert b"\n\twith autocast():\n\t\tout = model(x)" in rewritten
    if b"latin-1" in source:
        assert rewritten.startswith(b"# -*- coding: latin-1 -*-\n# caf\xe9\n")
    compile(rewritten, str(path), "exec")


def test_a_save_while_the_temporary_file_is_written_is_kept(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The comparison with what was read comes after the temporary file is written and
    fsynced (the slow part), just before the rename: an editor's save meanwhile wins."""
    real_fsync = os.fsync

    def save_meanwhile(descriptor: int) -> None:
        real_fsync(descriptor)
        if path.read_bytes() == b"x = 1\n":
            path.write_bytes(b"x = 'saved meanwhile'\n")

    monkeypatch.setattr(os, "fsync", save_meanwhile)
    with pytest.raises(ChangedOnDisk, match="changed on disk"):
        write_atomically(path, NEW, expected=b"x = 1\n")
    assert path.read_bytes() == b"x = 'saved meanwhile'\n"
    assert _names(path.parent) == ["train.py"]
