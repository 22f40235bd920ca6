"""Property tests: for training scripts generated from parts, the rewrite always keeps the
invariants of a correct AMP training step."""

from __future__ import annotations

import math
import re

import libcst as cst
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amprewrite.engine import rewrite_source
from amprewrite.options import Options
from tests.execution import (
    DTYPE_ENVS,
    FLOAT16_ENV,
    Job,
    run_scripts,
)
from tests.script_parts import Parts, script

PARTS = st.builds(
    Parts,
    shape=st.sampled_from(["toplevel", "function", "method"]),
    clip=st.booleans(), accumulate=st.booleans(), two_optimizers=st.booleans(),
    checkpoint=st.booleans(), evaluate=st.booleans(), taken_scaler_name=st.booleans(),
    comments=st.booleans(), odd_formatting=st.booleans(),
)


class _Facts(cst.CSTVisitor):
    """Backward calls, step calls, clip calls and update calls of the rewritten module, in
    order, and whether each sits inside a `with autocast():` block."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, bool]] = []  # (kind, code, inside autocast)
        self.autocast_depth = 0

    def visit_With(self, node: cst.With) -> None:
        if "autocast" in cst.Module([]).code_for_node(node.items[0].item):
            self.autocast_depth += 1

    def leave_With(self, original_node: cst.With) -> None:
        if "autocast" in cst.Module([]).code_for_node(original_node.items[0].item):
            self.autocast_depth -= 1

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Attribute):
            kind = node.func.attr.value
            if kind in ("backward", "step", "update", "unscale_", "clip_grad_norm_"):
                code = cst.Module([]).code_for_node(node)
                self.events.append((kind, code, self.autocast_depth > 0))


def _events(source: bytes) -> list[tuple[str, str, bool]]:
    facts = _Facts()
    cst.parse_module(source).visit(facts)
    return facts.events


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PARTS)
def test_rewrite_invariants(parts: Parts) -> None:
    source = script(parts).encode()
    result = rewrite_source(source, Options())
    compile(result.source, "generated.py", "exec")  # the output parses
    assert not rewrite_source(result.source, Options()).changed  # a second run: no change
    events = _events(result.source)
    backwards = [e for e in events if e[0] == "backward"]
    assert backwards and all(".scale(" in code for _, code, _ in backwards)  # all scaled
    assert not any(inside for kind, _, inside in events if kind == "backward")
    steps = [code for kind, code, _ in events if kind == "step"]
    assert steps and all(re.match(r"(self\.)?\w*scaler\.step\(", code)
                         for code in steps)  # every optimizer step goes through the scaler
    kinds = [kind for kind, _, _ in events if kind in ("step", "update", "unscale_",
                                                        "clip_grad_norm_")]
    assert kinds.count("update") == 1 and kinds[-1] == "update"  # once, after the last step
    for index, kind in enumerate(kinds):
        if kind == "clip_grad_norm_":
            assert "unscale_" in kinds[:index]  # unscale_ precedes every clip
    if parts.taken_scaler_name:
        assert b"grad_scaler = GradScaler()" in result.source  # a fresh name, never `scaler`


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=PARTS)
def test_rewritten_scripts_run_on_the_cpu(
    tmp_path_factory: pytest.TempPathFactory, parts: Parts
) -> None:
    """Each generated rewrite runs in bfloat16 and float16, then in float16 with an overflow
    injected midway (see tests/execution.py), which it must skip and survive."""
    path = tmp_path_factory.mktemp("generated") / "train.py"
    path.write_bytes(rewrite_source(script(parts).encode(), Options()).source)
    runs = run_scripts([Job.of(path, env=env) for env in DTYPE_ENVS.values()])
    for dtype, run in zip(DTYPE_ENVS, runs, strict=True):
        assert run.ok, run.explain() + "\n" + path.read_text()
        assert dtype in run.train_dtypes
    # in the middle of the run (natural overflows come and go at these tiny scales): the
    # injected step is skipped and the run ends with finite losses
    at = runs[-1].optimizer_steps // 2 + 1
    run = Job.of(path, env=FLOAT16_ENV, overflow_at=at).run()
    assert run.ok, run.explain() + "\n" + path.read_text()
    assert run.overflow_injected_at == at and at in run.skipped_at
    assert all(math.isfinite(loss) for loss in run.losses)
