"""O0 never leaves a script broken: after O1 (fixture inputs, generated scripts) and on mixed
precision the author wrote (generated in the shapes real projects use: a module scaler, one
passed to `train()`, a trainer's attribute, an optional argument, a flag's, each with or
without clipping, a logged or returned loss scale, a checkpoint), the result has no name read
that nothing binds, no method called on a name bound only to None and no scaler state restored
that is no longer saved; and a generated script that ran before O0 runs after it.

The checks here are Python's own (`symtable`, `ast`), written apart from the rule's.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import os
import symtable
import tempfile
import warnings
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amprewrite.engine import rewrite_source
from amprewrite.options import Options
from tests.fixture_cases import cases
from tests.script_parts import Parts, script

O0 = Options(opt_level="O0")
_BUILTINS = set(dir(builtins)) | {"__file__", "__name__", "__doc__"}


def unbound(source: str) -> set[str]:
    """Names some scope reads where Python finds no binding: not local, and not bound at
    module level (by the module or a `global` statement)."""
    table = symtable.symtable(source, "<script>", "exec")
    tables = [table]
    for scope in tables:
        tables.extend(scope.get_children())
    module = {s.get_name() for scope in tables for s in scope.get_symbols()
              if (scope is table or s.is_declared_global())
              and (s.is_assigned() or s.is_imported() or s.is_namespace())}
    return {f"{scope.get_name()}: {s.get_name()}" for scope in tables for s in scope.get_symbols()
            if s.is_referenced() and (scope is table or s.is_global())
            and s.get_name() not in module | _BUILTINS}


def _key(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        owner = _key(node.value)
        return owner and f"{owner}.{node.attr}"
    return None


def none_calls(source: str) -> set[str]:
    """`x.f()` on an `x` whose every assignment is `= None`, outside any `if` about `x`."""
    tree = ast.parse(source)
    assigned: dict[str, set[bool]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if (key := _key(target)) is not None:
                    is_none = isinstance(node.value, ast.Constant) and node.value.value is None
                    assigned.setdefault(key, set()).add(is_none)
    only_none = {key for key, kinds in assigned.items() if kinds == {True}}
    guarded = {key for node in ast.walk(tree) if isinstance(node, ast.If | ast.IfExp | ast.BoolOp)
               for sub in ast.walk(node.test if not isinstance(node, ast.BoolOp) else node)
               if (key := _key(sub) if isinstance(sub, ast.expr) else None)}
    return {f"{key}.{node.func.attr}()" for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and (key := _key(node.func.value)) in only_none and key not in guarded}


def restores_without_save(source: str) -> set[str]:
    """A grad scaler's `load_state_dict` where the module never saves its `state_dict()`."""
    calls = [(key, node.func.attr) for node in ast.walk(ast.parse(source))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and (key := _key(node.func.value)) and "scaler" in key.lower()]
    saved = {key for key, method in calls if method == "state_dict"}
    return {key for key, method in calls if method == "load_state_dict" and key not in saved}


def defects(source: bytes | str) -> set[str]:
    text = source.decode() if isinstance(source, bytes) else source
    return ({f"unbound {n}" for n in unbound(text)} | {f"None {c}" for c in none_calls(text)}
            | {f"restore {r}" for r in restores_without_save(text)})


def run(source: str) -> None:
    """Execute a generated script in this process, in a directory of its own (quietly: AMP
    for CUDA warns on a CPU)."""
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as directory, warnings.catch_warnings(), \
            contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        os.chdir(directory)
        try:
            exec(compile(source, "<script>", "exec"), {"__name__": "__main__"})
        finally:
            os.chdir(cwd)


# --- O1, then O0 -------------------------------------------------------------------------

_FP32_INPUTS = sorted({c.name for c in cases() if c.name.startswith(("rule_", "mnist", "main_"))
                       and c.expected.exists() and c.style == "O1"})
_STYLES = [Options(), Options(plain=True), Options(opt_level="O2"), Options(dtype="float16")]


@settings(max_examples=4, deadline=None)
@given(st.sampled_from(_FP32_INPUTS), st.sampled_from(_STYLES))
def test_o1_then_o0_leaves_no_dangling_name_in_a_fixture(name: str, options: Options) -> None:
    source = next(c for c in cases() if c.name == name).input.read_bytes()
    once = rewrite_source(source, options).source
    back = rewrite_source(once, O0).source
    assert defects(once) <= defects(source)
    assert defects(back) <= defects(source)


_PARTS = st.builds(Parts, shape=st.sampled_from(["toplevel", "function", "method"]),
                   clip=st.booleans(), accumulate=st.booleans(), two_optimizers=st.just(False),
                   checkpoint=st.booleans(), evaluate=st.booleans(),
                   taken_scaler_name=st.booleans(), comments=st.just(False),
                   odd_formatting=st.just(False))


@settings(max_examples=4, deadline=None)
@given(_PARTS, st.sampled_from(_STYLES[:2]))
def test_o1_then_o0_gives_a_script_that_runs(parts: Parts, options: Options) -> None:
    source = script(parts)
    back = rewrite_source(rewrite_source(source.encode(), options).source, O0).source.decode()
    assert not defects(back)
    run(back)


# --- O0 on the author's own AMP ----------------------------------------------------------

@dataclass(frozen=True)
class AuthorsAmp:
    """A hand-written AMP training script, from the shapes real projects use."""

    home: str  # "module", "passed", "attribute", "optional", "flag"
    spelling: str  # "torch.amp", "torch.cuda.amp", "imported"
    clip: bool
    scale_use: str  # "", "logged", "returned"
    checkpoint: bool

    def source(self) -> str:
        return _HEADERS[self.spelling] + _BODIES[self.home](self)


_HEADERS = {
    "torch.amp": "import torch\nimport torch.nn as nn\n\n",
    "torch.cuda.amp": "import torch\nimport torch.nn as nn\n\n",
    "imported": "import torch\nimport torch.nn as nn\nfrom torch.cuda.amp import GradScaler, "
                "autocast\n\n",
}
_CREATE = {"torch.amp": 'torch.amp.GradScaler("cuda")', "torch.cuda.amp":
           "torch.cuda.amp.GradScaler()", "imported": "GradScaler()"}
_AUTOCAST = {"torch.amp": 'torch.autocast("cpu", dtype=torch.bfloat16)',
             "torch.cuda.amp": "torch.cuda.amp.autocast()", "imported": "autocast()"}
_SETUP = ('CKPT = "checkpoint.pt"\nmodel = nn.Linear(4, 2)\n'
          "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
          "batches = [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(2)]\n")


def _step(amp: AuthorsAmp, s: str, indent: str, guarded: bool = False) -> str:
    """One iteration's code through scaler `s` (under `if s is not None:` when `guarded`,
    with the FP32 path in `else:`)."""
    lines = [f"with {_AUTOCAST[amp.spelling]}:",
             "    loss = nn.functional.cross_entropy(model(x), y)",
             "optimizer.zero_grad()"]
    amp_lines = [f"{s}.scale(loss).backward()"]
    plain = ["loss.backward()"]
    if amp.clip:
        amp_lines.append(f"{s}.unscale_(optimizer)")
        clip = "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
        amp_lines.append(clip)
        plain.append(clip)
    amp_lines += [f"{s}.step(optimizer)", f"{s}.update()"]
    plain.append("optimizer.step()")
    if guarded:
        lines += [f"if {s} is not None:", *(f"    {line}" for line in amp_lines), "else:",
                  *(f"    {line}" for line in plain)]
    else:
        lines += amp_lines
    if amp.scale_use == "logged" and not guarded:
        lines.append(f"print(f\"loss scale {{{s}.get_scale():.0f}}\")")
    return "".join(f"{indent}{line}\n" for line in lines)


def _checkpoint(amp: AuthorsAmp, s: str, indent: str, guarded: bool = False) -> str:
    if not amp.checkpoint:
        return ""
    entry = f'"scaler": {s}.state_dict()' if not guarded else (
        f'"scaler": {s}.state_dict() if {s} is not None else None')
    restore = f'{s}.load_state_dict(state["scaler"])'
    if guarded:
        restore = f"if {s} is not None:\n{indent}    {restore}"
    return (f'{indent}torch.save({{"model": model.state_dict(), {entry}}}, CKPT)\n'
            f"{indent}state = torch.load(CKPT)\n{indent}{restore}\n")


def _module(amp: AuthorsAmp) -> str:
    return (_SETUP + f"scaler = {_CREATE[amp.spelling]}\nfor x, y in batches:\n"
            + _step(amp, "scaler", "    ") + _checkpoint(amp, "scaler", ""))


def _passed(amp: AuthorsAmp) -> str:
    returned = amp.scale_use == "returned"
    return ("def train(model, optimizer, scaler, batches):\n    for x, y in batches:\n"
            + _step(amp, "scaler", "        ")
            + ("    return scaler.get_scale()\n" if returned else "") + "\n\ndef main():\n"
            + "".join(f"    {line}\n" for line in _SETUP.splitlines())
            + f"    scaler = {_CREATE[amp.spelling]}\n"
            + ("    scale = " if returned else "    ")
            + "train(model, optimizer, scaler, batches)\n"
            + ('    print(f"loss scale {scale:.0f}")\n' if returned else "")
            + _checkpoint(amp, "scaler", "    ") + "\n\nmain()\n")


def _trainer(amp: AuthorsAmp, optional: bool) -> str:
    signature = ", scaler=None" if optional else ""
    create = (f"        if scaler is None:\n            scaler = {_CREATE[amp.spelling]}\n"
              "        self.scaler = scaler\n" if optional
              else f"        self.scaler = {_CREATE[amp.spelling]}\n")
    step = _step(amp, "self.scaler", "        ").replace("model(", "self.model(").replace(
        "optimizer.", "self.optimizer.").replace("(optimizer)", "(self.optimizer)").replace(
        "model.parameters()", "self.model.parameters()")
    scale = ("\n    def loss_scale(self):\n        return self.scaler.get_scale()\n"
             if amp.scale_use == "returned" else "")
    state = ("\n    def state_dict(self):\n        return {\"optimizer\": self.optimizer"
             ".state_dict(), \"scaler\": self.scaler.state_dict()}\n"
             "\n    def load_state_dict(self, state):\n"
             "        self.optimizer.load_state_dict(state[\"optimizer\"])\n"
             "        self.scaler.load_state_dict(state[\"scaler\"])\n" if amp.checkpoint else "")
    use = ("trainer.load_state_dict(trainer.state_dict())\n" if amp.checkpoint else "") + (
        'print(f"loss scale {trainer.loss_scale():.0f}")\n' if scale else "")
    return (f"class Trainer:\n    def __init__(self, model, optimizer{signature}):\n"
            "        self.model = model\n        self.optimizer = optimizer\n" + create
            + "\n    def run_step(self, x, y):\n" + step + scale + state + "\n\n" + _SETUP
            + "trainer = Trainer(model, optimizer)\nfor x, y in batches:\n"
            "    trainer.run_step(x, y)\n" + use)


def _flag(amp: AuthorsAmp) -> str:
    return (_SETUP + "use_amp = True\nscaler = None\nif use_amp:\n"
            f"    scaler = {_CREATE[amp.spelling]}\nfor x, y in batches:\n"
            + _step(amp, "scaler", "    ", guarded=True)
            + _checkpoint(amp, "scaler", "", guarded=True))


_BODIES = {"module": _module, "passed": _passed, "flag": _flag,
           "attribute": lambda amp: _trainer(amp, optional=False),
           "optional": lambda amp: _trainer(amp, optional=True)}

_AUTHORS_AMP = st.builds(
    AuthorsAmp, home=st.sampled_from(sorted(_BODIES)),
    spelling=st.sampled_from(sorted(_HEADERS)), clip=st.booleans(),
    scale_use=st.sampled_from(["", "logged", "returned"]), checkpoint=st.booleans())


@settings(max_examples=12, deadline=None)
@given(_AUTHORS_AMP, st.sampled_from([None, Options()]))
def test_o0_on_the_authors_amp_leaves_a_script_that_runs(
    amp: AuthorsAmp, first: Options | None
) -> None:
    """O0 (straight, or after O1, which lints the author's AMP) either takes the AMP out
    whole or leaves the script as it was: never a script that crashes."""
    source = amp.source()
    run(source)
    assert not defects(source)
    if first is not None:
        source = rewrite_source(source.encode(), first).source.decode()
    result = rewrite_source(source.encode(), O0)
    output = result.source.decode()
    assert not defects(output), output
    run(output)
    codes = {f.code for f in result.findings}
    assert result.changed != ("AMP425" in codes), (codes, output)
    if result.changed:
        assert "scaler" not in output.replace("GradScaler", ""), output


@pytest.mark.parametrize("home", sorted(_BODIES))
def test_every_shape_of_the_authors_amp_runs_as_written(home: str) -> None:
    """The generator's scripts are correct AMP code: each shape runs before any rewrite."""
    run(AuthorsAmp(home, "torch.amp", clip=True, scale_use="returned", checkpoint=True).source())
