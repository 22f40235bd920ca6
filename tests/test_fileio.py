"""Writes are atomic, keep mode, encoding, BOM and newlines, and never write broken code."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from amprewrite.fileio import WriteRefused, write_atomically
from amprewrite.options import Options
from amprewrite.runner import Status, process_file
from tests.test_cli import TRAINING


def test_mode_is_kept_and_no_temporary_file_is_left(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_bytes(TRAINING)
    path.chmod(0o755)
    assert process_file(path, Options(), write=True, explicit=True).status is Status.CHANGED
    assert stat.S_IMODE(path.stat().st_mode) == 0o755
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"]


@pytest.mark.parametrize(
    "transform",
    [
        pytest.param(lambda s: s.replace(b"\n", b"\r\n"), id="crlf"),
        pytest.param(lambda s: b"\xef\xbb\xbf" + s, id="bom"),
        pytest.param(lambda s: s.replace(b"    ", b"\t"), id="tabs"),
    ],
)
def test_encoding_bom_newlines_and_indentation_are_kept(tmp_path: Path, transform) -> None:
    path = tmp_path / "train.py"
    source = transform(TRAINING)
    path.write_bytes(source)
    process_file(path, Options(), write=True, explicit=True)
    rewritten = path.read_bytes()
    assert b"scaler.scale(loss)" in rewritten
    if source.startswith(b"\xef\xbb\xbf"):
        assert rewritten.startswith(b"\xef\xbb\xbf") and rewritten.count(b"\xef\xbb\xbf") == 1
    if b"\r\n" in source:
        assert rewritten.count(b"\n") == rewritten.count(b"\r\n")
    if b"\t" in source:
        assert b"\n\t\twith autocast():\n" not in rewritten  # tabs stay tabs...
        assert b"\n\twith autocast():\n\t\tout = model(x)" in rewritten
    compile(rewritten, str(path), "exec")


def test_a_symlink_is_written_through(tmp_path: Path) -> None:
    target = tmp_path / "real.py"
    target.write_bytes(TRAINING)
    link = tmp_path / "link.py"
    link.symlink_to(target)
    process_file(link, Options(), write=True, explicit=True)
    assert link.is_symlink()
    assert b"scaler.scale(loss)" in target.read_bytes()


def test_broken_output_is_never_written(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_bytes(TRAINING)
    with pytest.raises(WriteRefused):
        write_atomically(path, b"def broken(:\n")
    assert path.read_bytes() == TRAINING
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"]
