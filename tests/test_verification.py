"""The verify step: a plan whose output breaks the AMP protocol, leaves a name unbound or
changes code outside its edits is not written. The edits of the function holding the broken
site are undone, the rest of the file goes on, and each rejection is a finding at the input's
line. The planner's bugs are simulated by taking a rule out of its recipe or by corrupting
the transformer's output."""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Callable, Iterator

import libcst as cst
import pytest

from amprewrite import engine
from amprewrite.engine import rewrite_source
from amprewrite.options import Options
from amprewrite.recipes.recipe import Recipe
from amprewrite.report import summary
from amprewrite.runner import FileOutcome, Status

SOURCE = textwrap.dedent("""\
    import torch
    import torch.nn as nn

    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


    def train_clipped(loader):
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()


    def train(loader):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        print("trained on", len(loader), "batches")
""")


@pytest.fixture
def without_rule(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Run the chosen recipe without the named rule: a planner that forgets its part."""
    def drop(name: str) -> None:
        choose = engine.choose

        def chosen(analysis: object, options: Options) -> Recipe:
            recipe = choose(analysis, options)  # type: ignore[arg-type]
            rules = tuple(r for r in recipe.rules if r.name != name)
            return dataclasses.replace(recipe, rules=rules)

        monkeypatch.setattr(engine, "choose", chosen)
    return drop


def _lines(result: engine.RewriteResult) -> list[str]:
    return [finding.format("t.py") for finding in result.findings]


def test_the_planner_s_rewrite_passes_its_own_check() -> None:
    result = rewrite_source(SOURCE.encode(), Options())
    assert result.changed and "scaler.unscale_(optimizer)" in result.source.decode()
    assert not [line for line in _lines(result) if " AMP7" in line]


def test_a_missing_unscale_rejects_that_function_only(without_rule: Callable[[str], None]) -> None:
    without_rule("unscaling")
    result = rewrite_source(SOURCE.encode(), Options())
    output = result.source.decode()
    assert SOURCE[SOURCE.index("def train_clipped"):SOURCE.index("def train(")] in output
    assert "scaler.scale(amp_loss).backward()" in output  # the other step is rewritten
    assert ("t.py:13:9: AMP706 gradients are read or changed here before "
            "`scaler.unscale_(optimizer)`; the rewrite of `train_clipped` is not written"
            ) in _lines(result)
    changes = [f.line for f in result.findings if f.code in ("AMP101", "AMP102", "AMP104")]
    assert changes and all(line > 15 for line in changes)  # none left in train_clipped
    compile(output, "t.py", "exec")


def test_a_name_left_unbound_is_refused(without_rule: Callable[[str], None]) -> None:
    """Without the rule creating the scaler, every use of it would raise NameError."""
    without_rule("scaler-creation")
    result = rewrite_source(SOURCE.encode(), Options())
    assert any("AMP709 `scaler` is read here but nothing binds it" in line
               for line in _lines(result))
    assert "scaler" not in result.source.decode()


class _ChangePrint(cst.CSTTransformer):
    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if isinstance(updated.func, cst.Name) and updated.func.value == "print":
            return updated.with_changes(args=[])
        return updated


def test_code_changed_outside_the_edits_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A transformer that also touches a statement no edit is on: its output is not written."""
    apply = engine.apply_edits

    def corrupting(module: cst.Module, *args: object) -> cst.Module:
        return apply(module, *args).visit(_ChangePrint())  # type: ignore[arg-type]

    monkeypatch.setattr(engine, "apply_edits", corrupting)
    result = rewrite_source(SOURCE.encode(), Options())
    assert result.source == SOURCE.encode() and not result.changed
    assert any(line.startswith("t.py:22:1: AMP710 ") for line in _lines(result)), _lines(result)
    assert not [line for line in _lines(result) if " AMP10" in line]


def test_the_summary_counts_the_rejections(without_rule: Callable[[str], None]) -> None:
    without_rule("unscaling")
    result = rewrite_source(SOURCE.encode(), Options())
    outcome = FileOutcome("t.py", Status.CHANGED, result.findings)
    assert summary([outcome], would=True) == (
        "1 file would be rewritten, 1 site where the protocol check rejected the rewrite "
        "(AMP7xx)")


def _steps(source: str) -> Iterator[str]:
    yield from (line.strip() for line in source.splitlines() if ".step(" in line)


def test_a_lint_fix_calling_a_none_scaler_is_not_applied() -> None:
    """DINO's layout: the FP32 branch of `if fp16_scaler is None:` keeps its plain step."""
    source = textwrap.dedent("""\
        import torch

        fp16_scaler = None
        if args.use_fp16:
            fp16_scaler = torch.amp.GradScaler("cuda")


        def train_one_epoch(model, optimizer, fp16_scaler):
            for x in loader:
                with torch.autocast("cuda", enabled=fp16_scaler is not None):
                    loss = model(x).pow(2).mean()
                optimizer.zero_grad()
                if fp16_scaler is None:
                    loss.backward()
                    optimizer.step()
                else:
                    fp16_scaler.scale(loss).backward()
                    fp16_scaler.step(optimizer)
                    fp16_scaler.update()
    """)
    result = rewrite_source(source.encode(), Options())
    assert list(_steps(result.source.decode())) == ["optimizer.step()",
                                                     "fp16_scaler.step(optimizer)"]
