"""A rewritten notebook runs in a real Jupyter kernel: the split_cells fixture, FP32 and as
amprewrite rewrites it, executed top to bottom on the CPU by nbclient with ipykernel."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

from amprewrite.notebooks import rewrite_notebook
from amprewrite.options import Options

nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "notebooks" / "split_cells"
KERNEL = "amprewrite-test"


@pytest.fixture
def kernel_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A kernel spec of this interpreter under a name of its own (no installed `python3` spec
    can stand in for it), and Jupyter's and IPython's files in `tmp_path`."""
    spec = tmp_path / "share" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL,
                                                  "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "share"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the CPU, whatever the machine has
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a tiny model: threads would only contend
    for name in ("AMPREWRITE_OPT_LEVEL", "AMPREWRITE_DTYPE", "AMPREWRITE_DEVICE"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def _execute(source: bytes, directory: Path) -> tuple[float, list[str]]:
    """Run every cell in a fresh kernel; the final loss and the dtypes the notebook saw."""
    notebook = nbformat.reads(source.decode(), as_version=4)
    client = nbclient.NotebookClient(notebook, kernel_name=KERNEL, timeout=300,
                                     resources={"metadata": {"path": str(directory)}})
    client.execute()
    printed = "".join(output.get("text", "") for output in notebook.cells[-1].outputs)
    loss = re.search(r"final loss ([\d.]+)", printed)
    dtypes = re.search(r"dtypes (\[.*\])", printed)
    assert loss is not None and dtypes is not None, printed
    assert (directory / "checkpoint.pt").is_file()
    return float(loss[1]), json.loads(dtypes[1].replace("'", '"'))


@pytest.mark.slow
def test_the_rewritten_notebook_trains_in_bfloat16_like_the_fp32_one(kernel_home: Path) -> None:
    fp32 = (FIXTURE / "input.ipynb").read_bytes()
    rewritten = rewrite_notebook(fp32, Options()).source
    assert b"from amprewrite_runtime import GradScaler, autocast" in rewritten
    (kernel_home / "fp32").mkdir()
    (kernel_home / "amp").mkdir()
    fp32_loss, fp32_dtypes = _execute(fp32, kernel_home / "fp32")
    amp_loss, amp_dtypes = _execute(rewritten, kernel_home / "amp")
    assert fp32_dtypes == ["torch.float32"]
    assert amp_dtypes == ["torch.bfloat16"]  # the logits, computed inside `with autocast():`
    assert fp32_loss < 0.5  # it learns: ln(4) = 1.39 at the start
    assert amp_loss == pytest.approx(fp32_loss, rel=0.1, abs=0.01)
