"""Using an AMP API is not training with AMP: which files are linted (AMP002), which rewritten."""

from __future__ import annotations

import pytest

from amprewrite.engine import rewrite_source
from amprewrite.options import Options

TRAIN = '''
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    {forward}
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
'''
FORWARD = "loss = ((model(x) - y) ** 2).mean()"


def _codes(source: str, **options: object) -> list[str]:
    return [f.code for f in rewrite_source(source.encode(), Options(**options)).findings]


def _script(header: str, forward: str = FORWARD, tail: str = "") -> str:
    return f"import torch\n{header}\n" + TRAIN.replace("{forward}", forward) + tail


EVALUATIONS = {
    "no_grad block": '''
def evaluate(model, x):
    with torch.no_grad():
        with torch.autocast("cuda"):
            return model(x)
''',
    "one with statement": '''
def score(model, x):
    with torch.no_grad(), torch.autocast("cuda"):
        return model(x)
''',
    "decorated function": '''
@torch.inference_mode()
def predict(model, x):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return model(x)
''',
    "evaluation function": '''
def validate(model, x):
    model.eval()
    with torch.autocast("cuda"):
        out = model(x)
    model.train()
    return out
''',
}


@pytest.mark.parametrize("evaluation", EVALUATIONS.values(), ids=list(EVALUATIONS))
def test_an_autocast_over_evaluation_only_leaves_training_to_rewrite(evaluation: str) -> None:
    codes = _codes(_script("", tail=evaluation))
    assert "AMP002" not in codes
    assert {"AMP144", "AMP101", "AMP102", "AMP104"} <= set(codes)


@pytest.mark.parametrize("source", [
    _script("", forward=f"with torch.autocast('cpu', dtype=torch.bfloat16):\n        {FORWARD}"),
    _script("scaler = torch.amp.GradScaler()"),
    _script("from torch.cuda.amp import GradScaler\nscaler = GradScaler()"),
    _script("", tail=EVALUATIONS["evaluation function"].replace("model.eval()", "pass").replace(
        "def validate", "def run_batch")),
], ids=["training autocast", "torch.amp scaler", "torch.cuda.amp scaler", "helper autocast"])
def test_training_that_already_uses_amp_is_linted(source: str) -> None:
    assert "AMP002" in _codes(source) or "AMP401" in _codes(source)
    assert "AMP101" not in _codes(source)


def test_an_evaluation_function_the_training_step_calls_is_training() -> None:
    helper = EVALUATIONS["evaluation function"].replace("return out", "return out.sum()")
    source = _script("", forward="loss = validate(model, x)", tail=helper)
    assert "AMP101" not in _codes(source)


def test_the_authors_evaluation_dtype_is_reused() -> None:
    source = _script("", tail=EVALUATIONS["decorated function"])
    output = rewrite_source(source.encode(), Options()).source.decode()
    assert 'autocast(dtype="bfloat16"):' in output
    assert output.count("torch.autocast(") == 1  # the author's, not wrapped again


def test_o0_leaves_a_script_with_evaluation_autocast_alone() -> None:
    source = _script("", tail=EVALUATIONS["no_grad block"])
    result = rewrite_source(source.encode(), Options(opt_level="O0"))
    assert not result.changed


@pytest.mark.parametrize("header", [
    "import apex\nmodel_sync = apex.parallel.convert_syncbn_model",
    "from apex.optimizers import FusedAdam\nfrom apex.parallel import SyncBatchNorm",
    "from apex import amp",
])
def test_apex_without_amp_calls_is_an_fp32_script(header: str) -> None:
    source = _script(header)
    output = rewrite_source(source.encode(), Options()).source.decode()
    assert all(line in output for line in header.splitlines())  # not migrated
    codes = _codes(source)
    assert "AMP002" not in codes and "AMP410" not in codes
    assert {"AMP101", "AMP102", "AMP104"} <= set(codes)
    assert ("AMP145" in codes) == header.endswith("import amp")


def test_apex_amp_called_is_still_migrated() -> None:
    source = _script("from apex import amp\nmodel, optimizer = amp.initialize(model, optimizer)")
    assert "AMP410" in _codes(source)
