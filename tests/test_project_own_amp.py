"""A project whose training runs the author's own mixed precision gets no autocast of
amprewrite's in its other modules' evaluation code (AMP613); a module training on its own in
FP32 is still rewritten, and a project training in FP32 is rewritten as before."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from amprewrite.cli import main

PREDICT = '''\
import torch

from {package}model import Net

model = Net(8, 2)
model.load_state_dict(torch.load("net.pt"))
model.eval()
with torch.no_grad():
    print(model(torch.randn(4, 8)).argmax(1))
'''

MODEL = "import torch\n\n\nclass Net(torch.nn.Linear):\n    pass\n"

TRAININGS = {
    "autocast and scaler": '''\
import torch

from {package}model import Net

model = Net(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler()
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda"):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
''',
    "a partial of autocast, in bfloat16": '''\
from functools import partial

import torch

from {package}model import Net

amp_autocast = partial(torch.autocast, device_type="cuda", dtype=torch.bfloat16)


class Trainer:
    def __init__(self):
        self.model = Net(8, 2)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def step(self, x, y):
        self.optimizer.zero_grad()
        with amp_autocast():
            loss = torch.nn.functional.cross_entropy(self.model(x), y)
        loss.backward()
        self.optimizer.step()
''',
}

FP32_TRAINING = TRAININGS["autocast and scaler"].replace(
    'with torch.autocast("cuda"):', "if True:").replace("scaler.scale(loss)", "loss").replace(
    "scaler.step(optimizer)", "optimizer.step()").replace(
    "scaler = torch.amp.GradScaler()\n", "").replace("    scaler.update()\n", "")


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'example'\n")
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def _check(work: Path, *paths: str) -> list[str]:
    cwd = os.getcwd()
    os.chdir(work)
    try:
        result = CliRunner().invoke(main, ["--check", *paths])
    finally:
        os.chdir(cwd)
    return [line.split(": ", 1)[1].split(" ", 1)[0] + " " + line.split(":", 1)[0]
            for line in result.output.splitlines() if ": AMP" in line]


@pytest.mark.parametrize(("training", "layout"), [
    (TRAININGS["autocast and scaler"], "flat"),
    (TRAININGS["a partial of autocast, in bfloat16"], "package"),
], ids=["autocast and scaler, flat", "a partial of autocast, a package"])
def test_the_projects_evaluation_code_is_kept(tmp_path: Path, training: str, layout: str
                                              ) -> None:
    package = "" if layout == "flat" else "."
    where = "" if layout == "flat" else "proj/"
    files = {f"{where}train.py": training.format(package=package),
             f"{where}model.py": MODEL, f"{where}predict.py": PREDICT.format(package=package)}
    if where:
        files[f"{where}__init__.py"] = ""
    found = _check(_project(tmp_path, files), ".")
    assert f"AMP613 {where}predict.py" in found
    assert not any(code.startswith(("AMP106", "AMP101", "AMP100")) for code in found)


def test_an_fp32_training_module_of_the_project_is_still_rewritten(tmp_path: Path) -> None:
    work = _project(tmp_path, {"train.py": TRAININGS["autocast and scaler"].format(package=""),
                               "finetune.py": FP32_TRAINING.format(package=""),
                               "model.py": MODEL, "predict.py": PREDICT.format(package="")})
    found = _check(work, ".")
    assert "AMP613 predict.py" in found
    assert "AMP101 finetune.py" in found and "AMP102 finetune.py" in found


def test_a_project_training_in_fp32_gets_its_evaluation_autocast(tmp_path: Path) -> None:
    work = _project(tmp_path, {"train.py": FP32_TRAINING.format(package=""),
                               "model.py": MODEL, "predict.py": PREDICT.format(package="")})
    found = _check(work, ".")
    assert "AMP106 predict.py" in found and not any("AMP613" in f for f in found)
