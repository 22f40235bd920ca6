"""The benchmarks' inputs stay what the numbers in docs/benchmarks.md claim they are."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from amprewrite.engine import rewrite_source
from amprewrite.options import Options

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import corpus  # noqa: E402  (benchmarks/ is a folder of scripts, not a package)


def test_the_generated_corpus_is_training_scripts_that_are_all_rewritten(tmp_path: Path) -> None:
    templates = corpus.training_scripts()
    paths = corpus.generate(tmp_path, len(templates))
    assert len({path.name.split("_", 2)[2] for path in paths}) == len(templates) > 30
    for path, template in zip(paths, templates, strict=True):
        source = path.read_bytes()
        compile(source, str(path), "exec")
        added = source.count(b"\n") - template.read_bytes().count(b"\n")
        assert added > 60, path.name  # at least six helper sections around the training step
        assert rewrite_source(source, Options()).changed, path.name
    assert corpus.generate(tmp_path / "again", 3)[2].read_bytes() == paths[2].read_bytes()


@pytest.mark.parametrize("model", ["mlp", "cnn", "lm", "tiny_mlp"])
def test_each_fp32_benchmark_script_is_rewritten_like_its_hand_written_twin(model: str) -> None:
    rewritten = rewrite_source((BENCHMARKS / "scripts" / f"{model}_fp32.py").read_bytes(),
                               Options()).source.decode()
    hand = (BENCHMARKS / "scripts" / f"{model}_torch_amp.py").read_text()
    assert "with autocast():" in rewritten and "with torch.autocast(" in hand
    for line in ("scaler.scale(loss).backward()", "scaler.step(optimizer)", "scaler.update()"):
        assert line in rewritten and line in hand


def test_the_generated_project_is_500_files_and_main_py_parses_no_plain_module(
    tmp_path: Path,
) -> None:
    import project_speed  # imports torch through _harness: only this test pays for it

    repo = project_speed.generate(tmp_path / "repo")
    assert (len(repo.plain), len(repo.torch), len(repo.training)) == (440, 50, 10)
    assert (repo.root / "pyproject.toml").is_file()
    for path in repo.files:
        source = path.read_bytes()
        compile(source, str(path), "exec")
        if path in repo.plain:
            assert b"torch" not in source, path
            if path.name != "__init__.py":
                assert 50 <= source.count(b"\n") <= 200, path
    plain = {path.relative_to(repo.root).as_posix() for path in repo.plain
             if path.name != "__init__.py"}  # a package's `__init__` is always looked at
    one = project_speed.reached(repo.root, [repo.root / "main.py"])
    assert one["linked_files"] == ["engine.py", "main.py"]
    assert set(one["outlined_files"]) == {"main.py", "engine.py"}  # models.py steps nothing
    whole = project_speed.reached(repo.root, repo.files)
    assert not plain & set(whole["outlined_files"])
    assert len(repo.training) <= whole["outlined"] < len(repo.torch) + len(repo.training)
    assert whole["linked_files"] == [
        "contrastive/main_ce.py", "contrastive/util.py", "detection/engine.py",
        "detection/main.py", "engine.py", "main.py", "trainers/train.py", "trainers/trainer.py"]
    again = project_speed.generate(tmp_path / "again")
    assert [p.read_bytes() for p in again.files] == [p.read_bytes() for p in repo.files]
