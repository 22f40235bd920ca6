"""apex.amp in every spelling is migrated; `amp.initialize` in every argument form keeps what it
returned; a rule's own error is an internal error (AMP004), never "cannot parse" (AMP003)."""

from __future__ import annotations

import libcst as cst
import pytest

from amprewrite import engine
from amprewrite.engine import rewrite_source
from amprewrite.options import Options
from amprewrite.runner import process_source

STEP = '''\
model = nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
{initialize}
for x, y in loader:
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    with {amp}.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
    optimizer.step()
'''


def _script(imports: str, amp: str, initialize: str = "", indent: str = "") -> str:
    initialize = initialize or (
        f'model, optimizer = {amp}.initialize(model, optimizer, opt_level="O1")')
    body = STEP.format(amp=amp, initialize=initialize)
    if indent:
        body = "def train(loader):\n" + "".join(indent + line + "\n" for line in body.splitlines())
    return f"import torch\nimport torch.nn as nn\n{imports}\n\n{body}"


def _rewrite(source: str, **options: object) -> tuple[str, list[str]]:
    result = rewrite_source(source.encode(), Options(**options))  # type: ignore[arg-type]
    return result.source.decode(), [f.format("t.py") for f in result.findings]


SPELLINGS = {
    "import apex": ("import apex", "apex.amp"),
    "import apex.amp": ("import apex.amp", "apex.amp"),
    "import apex.amp as amp": ("import apex.amp as amp", "amp"),
    "from apex import amp as apex_amp": ("from apex import amp as apex_amp", "apex_amp"),
    "import apex behind a flag": ("if use_fp16:\n    import apex", "apex.amp"),
}


@pytest.mark.parametrize(("spelling", "indent"), [
    (spelling, "    " * (index % 2)) for index, spelling in enumerate(SPELLINGS.values())
], ids=[f"{name}, {('module level', 'function')[index % 2]}"
        for index, name in enumerate(SPELLINGS)])
def test_apex_amp_in_every_spelling_is_migrated(spelling: tuple[str, str], indent: str) -> None:
    imports, amp = spelling
    output, findings = _rewrite(_script("use_fp16 = True\n" + imports, amp, indent=indent))
    assert "apex" not in output
    assert "scaler.scale(loss).backward()" in output and "scaler.step(optimizer)" in output
    assert any(f"AMP410 apex `{amp}.initialize(...)` migrated" in f for f in findings)
    assert any(f"AMP411 apex `{amp}.scale_loss(...)` migrated" in f for f in findings)
    compile(output, "t.py", "exec")


def test_import_apex_used_for_more_than_amp_stays() -> None:
    source = _script("import apex", "apex.amp").replace(
        "model = nn.Linear(8, 1)", "model = apex.parallel.convert_syncbn_model(nn.Linear(8, 1))")
    output, findings = _rewrite(source)
    assert "import apex\n" in output and "apex.amp" not in output
    assert any("AMP410" in f for f in findings)


INITIALIZE = {
    "keywords": ('model, optimizer = amp.initialize(models=model, optimizers=optimizer, '
                 'opt_level="O1")', None),
    "keywords reordered": ('model, optimizer = amp.initialize(optimizers=optimizer, '
                           'opt_level="O1", models=model)', None),
    "model only": ('model = amp.initialize(model, opt_level="O1")', None),
    "rebound by keyword": ('net, opt = amp.initialize(model, optimizers=optimizer)',
                           "net, opt = model, optimizer"),
    "returned": ("def setup(model, optimizer):\n    return amp.initialize(model, optimizer)",
                 "return (model, optimizer)"),
    "model only, rebound": ("net = amp.initialize(model)", "net = model\n"),
}


@pytest.mark.parametrize(("initialize", "kept"), INITIALIZE.values(), ids=list(INITIALIZE))
def test_initialize_in_every_argument_form_keeps_what_it_returned(
        initialize: str, kept: str | None) -> None:
    output, findings = _rewrite(_script("from apex import amp", "amp", initialize))
    assert "amp.initialize" not in output and not any("AMP00" in f for f in findings)
    assert kept is None or kept in output
    assert "model = model" not in output  # `model = model,` made the model a tuple
    compile(output, "t.py", "exec")


@pytest.mark.parametrize(("enabled", "level"), [
    ("enabled=args.fp16", '"O1" if args.fp16 else "O0"'),
    ("enabled=not args.fp32", '"O1" if (not args.fp32) else "O0"'),
])
def test_initialize_switched_by_enabled_keeps_its_switch(enabled: str, level: str) -> None:
    initialize = f'model, optimizer = amp.initialize(model, optimizer, {enabled})'
    output, _ = _rewrite(_script("from apex import amp\nargs = get_args()", "amp", initialize))
    assert f"GradScaler({level})" in output


def test_a_rules_syntax_error_is_an_internal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """libcst's CSTValidationError is a SyntaxError: a node a rule built, not the input."""
    def invalid(source: bytes, options: Options) -> None:
        raise cst.CSTValidationError("A zero-length tuple must be wrapped in parentheses.")

    monkeypatch.setattr(engine, "rewrite_source", invalid)
    [finding] = process_source("t.py", b"x = 1\n", Options(), True).findings
    assert finding.code == "AMP004" and "internal error (CSTValidationError" in finding.message


BESIDE_OWN_SCALER = '''\
import torch
from apex import amp


class ApexLossScaler:
    def __call__(self, loss, optimizer):
        with amp.scale_loss(loss, optimizer) as scaled:
            scaled.backward()
        optimizer.step()


class TorchLossScaler:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def __call__(self, loss, optimizer):
        self.scaler.scale(loss).backward()
        self.scaler.step(optimizer)
        self.scaler.update()
'''


@pytest.mark.parametrize("spelling", ["from apex import amp", "import apex"])
def test_apex_beside_the_authors_torch_scaler_is_kept(spelling: str) -> None:
    """Migrated, apex's loss scaling would be a plain backward the rewrite does not scale (the
    file's precision is its author's): the file is left as written, AMP413 says why; O0
    still takes apex out."""
    source = BESIDE_OWN_SCALER.replace("from apex import amp", spelling)
    if spelling == "import apex":
        source = source.replace("amp.scale_loss", "apex.amp.scale_loss")
    output, findings = _rewrite(source)
    assert output == source
    assert [f for f in findings if "AMP413" in f and ":7:9:" in f], findings
    assert not any("AMP411" in f for f in findings)
    o0, _ = _rewrite(source, opt_level="O0")
    assert "scale_loss" not in o0 and "loss.backward()" in o0
    compile(o0, "t.py", "exec")


APEX_OR_NATIVE = '''\
import torch
try:
    from apex import amp
    has_apex = True
except ImportError:
    has_apex = False


def main(args, model, loader):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = None
    if args.amp == "apex":
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    elif args.amp == "native":
        scaler = torch.cuda.amp.GradScaler()
    for x, y in loader:
        with torch.cuda.amp.autocast(enabled=scaler is not None):
            loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        if args.amp == "apex":
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
            optimizer.step()
        elif scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
'''


def test_apex_or_native_choice_keeps_the_apex_arm() -> None:
    """`--amp apex|native` in one loop: migrated, the apex arm became a plain backward and
    step that the lint (the native arm is the author's) leaves FP32; now kept, AMP413."""
    output, findings = _rewrite(APEX_OR_NATIVE)
    assert output == APEX_OR_NATIVE
    assert sum("AMP413" in f for f in findings) == 2, findings
