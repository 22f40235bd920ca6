"""The op table's views (`amprewrite.analysis.dtype`), and the rewrites its corrections change.
The table itself is checked against torch in tests/runtime/test_op_table.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from amprewrite.analysis.dtype import views
from amprewrite.analysis.dtype.ops import OPS, Cast
from amprewrite.engine import rewrite_source
from amprewrite.generated_docs import ops_page
from amprewrite.options import Options

STEP = '''import torch
import torch.nn as nn
import torch.nn.functional as F

model = nn.Linear(4, 4)
A = torch.randn(4, 4)
v = torch.randn(4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y, ids in batches:
    out = model(x)
    score = {score}
    loss = ((out - y) ** 2).mean() + score.sum()
    loss.backward()
    optimizer.step()
    print(score.detach().numpy())
'''


def test_one_row_per_name_and_every_row_spelled_somewhere() -> None:
    names = [op.name for op in OPS]
    assert len(names) == len(set(names))
    assert all(op.where and op.example for op in OPS)


@pytest.mark.parametrize("name", ["addbmm", "chain_matmul", "prelu", "tensordot"])
def test_the_matmuls_the_two_tables_disputed_run_low_on_the_cpu(name: str) -> None:
    op = views.function_op("torch", name)
    assert op is not None and op.cpu is Cast.LOW and views.runs_low_one_dtype("torch", name)


@pytest.mark.parametrize(("name", "cuda"), [
    ("mv", Cast.LOW), ("addmv", Cast.LOW), ("tensordot", Cast.PROMOTE),
    ("bilinear", Cast.PROMOTE), ("inner", Cast.LOW), ("embedding", Cast.NONE)])
def test_cuda_autocast_classes(name: str, cuda: Cast) -> None:
    op = views.function_op("torch", name) or views.method_op(name)
    assert op is not None and op.cuda is cuda


def test_the_namespaces_and_rows_without_low_kernels_need_float32() -> None:
    assert views.needs_float32("torch.linalg", "eigh")
    assert views.needs_float32("torch", "cdist") and views.needs_float32("torch", "lerp")
    assert not views.needs_float32("torch", "outer")  # it promotes mixed dtypes


@pytest.mark.parametrize(("score", "cast"), [
    ("torch.mv(A, v)", True),  # low under CUDA autocast although both inputs are float32
    ("F.embedding(ids, A)", False),  # its float32 table's dtype: autocast leaves it alone
    ("torch.outer(v, v)", False),  # float32 inputs: float32 under autocast
])
def test_a_value_leaving_autocast_is_cast_by_the_tables_word(score: str, cast: bool) -> None:
    result = rewrite_source(STEP.format(score=score).encode(), Options())
    output = result.source.decode()
    assert ("score.detach().float().numpy()" in output) is cast, output
    assert ("AMP112" in {f.code for f in result.findings}) is cast


def test_every_autocast_spelling_the_runtimes_included() -> None:
    assert {"torch.amp.autocast_mode.autocast", "torch.cpu.amp.autocast",
            "amprewrite_runtime.autocast"} <= views.AUTOCASTS
    assert "torch.cpu.amp.autocast" not in views.MAYBE_FLOAT16_AUTOCASTS
    assert views.fixed_device("torch.cuda.amp.autocast") == "cuda"
    assert views.fixed_device("torch.autocast") is None


def test_the_table_imports_no_torch() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, amprewrite.analysis.dtype.views; "
         "print('torch' in sys.modules)"], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "False"


def test_the_committed_ops_page_is_generated_from_the_table() -> None:
    page = Path(__file__).resolve().parent.parent / "docs" / "ops.md"
    assert page.read_text(encoding="utf-8") == ops_page(), (
        "run `python -m amprewrite.generated_docs` and commit docs/ops.md")


CUSTOM_FUNCTION = '''import torch
import torch.nn as nn


class Op(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return {call}

    @staticmethod
    def backward(ctx, grad):
        return grad


model = nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in batches:
    loss = Op.apply(model(x)).sum()
    loss.backward()
    optimizer.step()
'''


@pytest.mark.parametrize(("call", "float32"), [
    ("torch.cdist(x, x)", True),  # no bfloat16/float16 kernel
    ("torch.linalg.eigh(x).eigenvalues", True),
    ("torch.symeig(x)[0]", True),  # removed for torch.linalg.eigh
    ("torch.matrix_exp(x)", False),  # it has low-precision kernels
])
def test_a_custom_forward_casts_its_inputs_where_an_op_has_no_low_kernel(
        call: str, float32: bool) -> None:
    output = rewrite_source(CUSTOM_FUNCTION.format(call=call).encode(), Options()).source
    assert (b'@custom_fwd(cast_inputs="float32")' in output) is float32, output.decode()


def test_the_one_dtype_ops_autocast_leaves_alone_somewhere() -> None:
    assert views.may_mix_under_autocast("torch", "lerp")  # none on both
    assert views.may_mix_under_autocast("torch", "dot")  # none on the CPU, promote on CUDA
    assert not views.may_mix_under_autocast("torch", "matmul")  # low on both
    linear, norm = views.module_op("Linear"), views.module_op("LayerNorm")
    assert linear is not None and linear.cpu is Cast.LOW and linear.cuda is Cast.LOW
    assert norm is not None and Cast.LOW not in (norm.cpu, norm.cuda)
    assert views.module_op("Sequential") is None
