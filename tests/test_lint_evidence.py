"""The lint's fixes on the author's AMP code are judged by the protocol checker's reading of
it: a branch where the scaler is None (or the FP32 arm behind the author's flag) is never a
fix target, a mistake on a path where the scaler is on everywhere is fixed, and a mistake no
path of the checker's reaches is reported with its fix offered as unsafe (`--unsafe-fixes`)."""

from __future__ import annotations

import textwrap

import pytest

from amprewrite.analysis import lint_evidence
from amprewrite.analysis.lint_evidence import Verdict
from amprewrite.engine import rewrite_source
from amprewrite.options import Options

NONE_UNLESS_FLAG = {
    "is None": ("if fp16_scaler is None:", "else:"),
    "is not None, swapped": ("if fp16_scaler is not None:", "else:"),
    "truthiness": ("if not fp16_scaler:", "else:"),
}


def _dino(test: str, where: str) -> str:
    fp32 = "loss.backward()\noptimizer.step()\n"
    amp = ("fp16_scaler.scale(loss).backward()\nfp16_scaler.step(optimizer)\n"
           "fp16_scaler.update()\n")
    first, second = (amp, fp32) if "swapped" in where else (fp32, amp)
    step = (f"{NONE_UNLESS_FLAG[where][0]}\n" + textwrap.indent(first, "    ")
            + f"{NONE_UNLESS_FLAG[where][1]}\n" + textwrap.indent(second, "    "))
    body = ("for x, y in loader:\n"
            "    with torch.autocast('cuda', enabled=fp16_scaler is not None):\n"
            "        loss = torch.nn.functional.mse_loss(model(x), y)\n"
            "    optimizer.zero_grad()\n" + textwrap.indent(step, "    "))
    head = (f"import torch\n\nfp16_scaler = None\n{test}\n"
            "    fp16_scaler = torch.amp.GradScaler('cuda')\n")
    if "module" in test:
        return head + body
    return (head + "\n\ndef train_one_epoch(model, optimizer, loader, fp16_scaler):\n"
            + textwrap.indent(body, "    ")
            + "\n\ntrain_one_epoch(model, optimizer, loader, fp16_scaler)\n")


@pytest.mark.parametrize("where", NONE_UNLESS_FLAG)
@pytest.mark.parametrize("test", ["if args.use_fp16:", "if not args.no_fp16:",
                                  "if args.use_fp16:  # module"])
def test_the_branch_where_the_scaler_is_none_is_no_fix_target(test: str, where: str) -> None:
    source = _dino(test, where)
    result = rewrite_source(source.encode(), Options())
    assert result.source.decode() == source
    mistakes = [f for f in result.findings if f.code.startswith(("AMP6", "AMP7"))]
    fp32 = [line for line, text in enumerate(source.splitlines(), 1)
            if text.strip() in ("loss.backward()", "optimizer.step()")]
    assert [(f.code, f.line) for f in mistakes] == [("AMP630", line) for line in fp32]


def test_a_checkpoint_that_stores_the_scaler_state_under_a_test_is_complete() -> None:
    source = textwrap.dedent("""\
        import torch
        scaler = torch.amp.GradScaler("cuda") if args.amp else None
        for x, y in loader:
            with torch.autocast("cuda", enabled=scaler is not None):
                loss = model(x).sum()
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
        if scaler is not None:
            state["scaler"] = scaler.state_dict()
        torch.save(state, "last.pt")
    """)
    result = rewrite_source(source.encode(), Options())
    assert result.source.decode() == source
    assert not [f for f in result.findings if f.code == "AMP605"]


def test_a_checkpoint_where_the_scaler_may_be_none_is_reported_not_fixed() -> None:
    source = textwrap.dedent("""\
        import torch
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cuda") if args.amp else None
        for x, y in loader:
            loss = model(x).sum()
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "x.pt")
    """)
    result = rewrite_source(source.encode(), Options())
    assert result.source.decode() == source
    [finding] = [f for f in result.findings if f.code == "AMP605"]
    assert finding.message.endswith("`scaler` may be None or unset here, save its "
                                    "`state_dict()` where it exists")


@pytest.mark.parametrize("placement", ["module", "function", "method"])
def test_the_textbook_plain_step_after_scaled_losses_is_routed(placement: str) -> None:
    step = ("optimizer.zero_grad()\nwith torch.autocast('cuda'):\n"
            "    loss = model(x).pow(2).mean()\nscaler.scale(loss).backward()\n"
            "optimizer.step()\nscaler.update()\n")
    if placement == "module":
        source = ("import torch\nscaler = torch.amp.GradScaler('cuda')\nfor x in loader:\n"
                  + textwrap.indent(step, "    "))
    elif placement == "function":
        source = ("import torch\n\n\ndef train(model, optimizer, scaler, loader):\n"
                  "    for x in loader:\n" + textwrap.indent(step, "        "))
    else:
        source = ("import torch\n\n\nclass Trainer:\n    def __init__(self):\n"
                  "        self.scaler = torch.amp.GradScaler('cuda')\n\n"
                  "    def fit(self, loader):\n        for x in loader:\n"
                  + textwrap.indent(step.replace("scaler.", "self.scaler.").replace(
                      "optimizer.", "self.optimizer.").replace("model(", "self.model("),
                      "            "))
    result = rewrite_source(source.encode(), Options())
    output = result.source.decode()
    assert "scaler.step(" in output and "optimizer.step()" not in output
    assert [f.code for f in result.findings if f.code.startswith("AMP6")] == ["AMP601"]


def test_a_plain_step_of_an_fp32_critic_beside_the_textbook_mistake_is_left() -> None:
    source = textwrap.dedent("""\
        import torch
        scaler = torch.amp.GradScaler("cuda")
        critic_optimizer = torch.optim.Adam(critic.parameters())
        optimizer = torch.optim.Adam(model.parameters())
        for x in loader:
            critic_loss = critic(x).mean()
            critic_loss.backward()
            critic_optimizer.step()
            with torch.autocast("cuda"):
                loss = model(x).mean()
            scaler.scale(loss).backward()
            optimizer.step()
            scaler.update()
    """)
    output = rewrite_source(source.encode(), Options()).source.decode()
    assert "critic_optimizer.step()" in output and "scaler.step(optimizer)" in output
    # where the checker cannot tell the two apart (nothing says what `optimizer` steps), both
    # go through the scaler: the fixes stay consistent
    unknown = source.replace("optimizer = torch.optim.Adam(model.parameters())\n", "")
    output = rewrite_source(unknown.encode(), Options()).source.decode()
    assert "scaler.step(critic_optimizer)" in output and "scaler.step(optimizer)" in output


def test_a_fix_no_path_reaches_is_offered_as_unsafe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the checker's reading sees no path to a site, its fix is reported, and applied
    only with --unsafe-fixes."""
    monkeypatch.setattr(lint_evidence.Evidence, "_judge", lambda self, where: Verdict.UNSAFE)
    source = textwrap.dedent("""\
        import torch
        scaler = torch.amp.GradScaler("cuda")
        for x in loader:
            with torch.autocast("cuda"):
                loss = model(x).mean()
            scaler.scale(loss).backward()
            aux_loss.backward()
            scaler.step(optimizer)
            scaler.update()
    """)
    kept = rewrite_source(source.encode(), Options())
    assert kept.source.decode() == source
    [note] = [f.message for f in kept.findings if f.code == "AMP609"]
    assert note.endswith("(unsafe fix, not applied: the protocol check sees no path to this "
                         "site (--unsafe-fixes applies it))")
    fixed = rewrite_source(source.encode(), Options(unsafe_fixes=True))
    assert "scaler.scale(aux_loss).backward()" in fixed.source.decode()
    [note] = [f.message for f in fixed.findings if f.code == "AMP609"]
    assert note.endswith("(unsafe fix applied)")


def test_an_attribute_scaler_set_under_a_flag_is_not_saved_unconditionally() -> None:
    """`if USE_AMP: self.scaler = ...` in `__init__`: a checkpoint in another method that
    saved `self.scaler.state_dict()` would raise AttributeError in the FP32 run."""
    source = textwrap.dedent("""\
        import torch
        USE_AMP = False


        class Trainer:
            def __init__(self, model):
                self.model = model
                self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                if USE_AMP:
                    self.scaler = torch.amp.GradScaler("cpu")

            def fit(self, loader):
                for x in loader:
                    loss = self.model(x).sum()
                    if USE_AMP:
                        self.scaler.scale(loss).backward()
                        self.scaler.step(self.optimizer)
                        self.scaler.update()
                    else:
                        loss.backward()
                        self.optimizer.step()
                torch.save({"optimizer": self.optimizer.state_dict()}, "last.pt")
    """)
    result = rewrite_source(source.encode(), Options())
    assert result.source.decode() == source
    [finding] = [f for f in result.findings if f.code == "AMP605"]
    assert "`self.scaler` may be None or unset here" in finding.message
