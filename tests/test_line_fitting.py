"""Lines the rewrite takes past the line limit are wrapped as black wraps them
(`line_fitting`), the author's are not, and the program never changes."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from amprewrite.cli import main
from amprewrite.line_fitting import line_fitter, line_joiner
from tests.fixture_cases import Case, cases

UNIT = "    "


def _fit(code: str, limit: int, original: str = "") -> str:
    return line_fitter(original, limit, UNIT)(code)


def _limit(source: str) -> int:
    """The limit a fixture's rewrite keeps to: no configuration, so the file's own."""
    return max(79, *map(len, source.splitlines()))


def _introduced(source: str, output: str) -> list[str]:
    """The output's lines past the limit that are not the author's."""
    limit = _limit(source)
    own = set(source.splitlines())
    over = {line.strip() for line in own if len(line) > limit}
    return [line for line in output.splitlines() if len(line) > limit
            and line not in own and line.strip() not in over]


@pytest.mark.parametrize("case", [c for c in cases() if c.expected.exists()], ids=str)
def test_no_rewrite_of_a_fixture_passes_its_line_limit(case: Case) -> None:
    """The class: every fixture's every output style (31 lines over before the fitting)."""
    assert _introduced(case.input.read_text(), case.expected.read_text()) == []


SHAPES = [
    pytest.param(  # the last call with arguments; the comment stays at the statement's end
        "test_loss += F.nll_loss(output, target, reduction='sum').item()  # batch loss\n", 50,
        "test_loss += F.nll_loss(\n    output, target, reduction='sum'\n).item()  # batch loss\n",
        id="call-then-trailer"),
    pytest.param(  # a value of several operands: parentheses of its own, an operand per line
        "d_loss = F.softplus(D(fake)).mean() + F.softplus(-real_out).mean() + gamma / 2 * r1\n",
        50,
        "d_loss = (\n    F.softplus(D(fake)).mean()\n    + F.softplus(-real_out).mean()\n"
        "    + gamma / 2 * r1\n)\n", id="operands"),
    pytest.param(  # one operator, ending in a call that splits well: black omits the parens
        "loss = F.mse_loss(agent.get_value(z), y) + F.cross_entropy(agent.get_logits(z), labels)\n",
        80,
        "loss = F.mse_loss(agent.get_value(z), y) + F.cross_entropy(\n"
        "    agent.get_logits(z), labels\n)\n", id="one-operator-call"),
    pytest.param(  # the split at the call would leave one token inside: parentheses instead
        "actor_loss = (probs * (alpha * probs.log() - q_values)).sum(1).mean()\n", 60,
        "actor_loss = (\n    (probs * (alpha * probs.log() - q_values)).sum(1).mean()\n)\n",
        id="one-token-inside"),
    pytest.param(
        "q_target[index, actions] = (rewards + 0.9 * q_next.max(1)[0]).to(q_target.dtype)\n", 70,
        "q_target[index, actions] = (rewards + 0.9 * q_next.max(1)[0]).to(\n"
        "    q_target.dtype\n)\n", id="cast-appended"),
    pytest.param(  # arguments one per line with a trailing comma, the long one split again
        "print(step, loss.item(), accuracy(logits.detach().float(), y, top=2), norm(x.float()))\n",
        41,
        "print(\n    step,\n    loss.item(),\n    accuracy(\n"
        "        logits.detach().float(), y, top=2\n    ),\n    norm(x.float()),\n)\n",
        id="one-per-line"),
    pytest.param(
        "from amprewrite_runtime import accelerate_float8_handlers, accelerate_mixed_precision\n",
        79,
        "from amprewrite_runtime import (\n    accelerate_float8_handlers,\n"
        "    accelerate_mixed_precision,\n)\n", id="import"),
    pytest.param(
        'with amp.autocast("cuda", enabled=cuda):  # stability issues when enabled\n    pass\n',
        50,
        'with amp.autocast(\n    "cuda", enabled=cuda\n):  # stability issues when enabled\n'
        "    pass\n", id="with-header"),
    pytest.param(  # a generator argument: its commas are its own, it splits before `for`
        "total = sum(F.mse_loss(model(x), y).item() for x, y in loader_of_evaluation)\n", 60,
        "total = sum(\n    F.mse_loss(model(x), y).item()\n"
        "    for x, y in loader_of_evaluation\n)\n",
        id="generator"),
    pytest.param(  # a lambda's parameters are not arguments
        "step(optimizer, clip=lambda a, b: torch.nn.utils.clip_grad_norm_(a, b), scaler=s)\n", 60,
        "step(\n    optimizer,\n    clip=lambda a, b: torch.nn.utils.clip_grad_norm_(a, b),\n"
        "    scaler=s,\n)\n", id="lambda"),
    pytest.param(
        "a, b = model(inputs.float(), labels.long()), other(inputs.float(), labels.long())\n",
        60,
        "a, b = (\n    model(inputs.float(), labels.long()),\n"
        "    other(inputs.float(), labels.long()),\n)\n", id="tuple-value"),
    pytest.param(  # brackets and commas in strings and f-strings are text
        'log(f"{step}: {loss.item():.4f} (, [", "#x", value=logits.detach().float())\n', 40,
        'log(\n    f"{step}: {loss.item():.4f} (, [",\n    "#x",\n'
        "    value=logits.detach().float(),\n)\n", id="strings"),
    pytest.param(
        "def f():\n    return F.binary_cross_entropy(p_fake.float(), torch.zeros_like(p_fake)"
        ".float())\n", 79,
        "def f():\n    return F.binary_cross_entropy(\n        p_fake.float(), "
        "torch.zeros_like(p_fake).float()\n    )\n", id="return-indented"),
    pytest.param(  # a line inside the author's own brackets: filled, the rest on the next
        "step_optimizer(\n"
        "    self.optimizer, clip_grads=lambda p: clip(p, 1.0), scaler=self.scaler)\n",
        60,
        "step_optimizer(\n    self.optimizer, clip_grads=lambda p: clip(p, 1.0),\n"
        "    scaler=self.scaler)\n", id="continuation"),
    pytest.param(
        "loss = F.cross_entropy(logits.float(), labels, label_smoothing=0.1)\r\nx = 1\r\n", 50,
        "loss = F.cross_entropy(\r\n    logits.float(), labels, label_smoothing=0.1\r\n)\r\n"
        "x = 1\r\n", id="crlf"),
]


@pytest.mark.parametrize(("code", "limit", "expected"), SHAPES)
def test_each_shape_is_wrapped_as_black_wraps_it(code: str, limit: int, expected: str) -> None:
    fitted = _fit(code, limit)
    assert fitted == expected
    assert ast.dump(ast.parse(fitted)) == ast.dump(ast.parse(code.replace("\r\n", "\n")))
    assert _fit(fitted, limit) == fitted  # a second run changes nothing


@pytest.mark.parametrize("code", [
    "x = F.cross_entropy(logits.float(), labels, label_smoothing=0.1)  # noqa: E501\n",
    "x = F.cross_entropy(logits.float(), labels, label_smoothing=0.1)  # type: ignore\n",
    "x = F.cross_entropy(logits.float(), labels, smoothing=0.1)  # amprewrite: ignore[AMP1]\n",
    "x = F.cross_entropy(logits.float(), labels, label_smoothing=0.1)  # fmt: skip\n",
    "x = F.cross_entropy(logits.float(), labels); y = F.mse_loss(a.float(), b.float())\n",
    "x = averyveryveryveryveryveryveryveryveryveryveryveryveryveryveryverylongname\n",
])
def test_what_is_left_as_it_is(code: str) -> None:
    """Directive comments, two statements on a line, nothing to split at."""
    assert _fit(code, 40) == code


def test_the_authors_lines_over_the_limit_stay_also_when_indented() -> None:
    authors = "x = F.cross_entropy(logits.float(), labels, label_smoothing=0.1)\n"
    assert _fit(authors, 40, original=authors) == authors
    moved = "with autocast():\n    " + authors
    assert _fit(moved, 40, original=authors) == moved  # the rewrite only indented it


def test_a_line_moved_into_autocast_past_the_limit_is_wrapped() -> None:
    original = "loss = F.cross_entropy(logits, labels, label_smoothing=0.1)\n"  # 59 columns
    moved = "with autocast():\n    " + original
    assert _fit(moved, 60, original=original) == (
        "with autocast():\n    loss = F.cross_entropy(\n        logits, labels, "
        "label_smoothing=0.1\n    )\n")


NAMES = st.sampled_from(["x", "loss", "model", "target_pmfs", "self.scaler", "F.softplus",
                         "torch.max", "'sum'", "0.5"])


def _expressions() -> st.SearchStrategy[str]:
    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.builds(lambda f, a: f"{f}({', '.join(a)})", NAMES, st.lists(inner, max_size=4)),
            st.builds(lambda f, a: f"{f}(dim={a})", NAMES, inner),
            st.builds(lambda a, m: f"({a}).{m}", inner,
                      st.sampled_from(["float()", "mean()", "to(x.dtype)", "sum(1)"])),
            st.builds(lambda f, a: f"{f}[{a}]", NAMES, inner),
            st.builds(lambda a, n: f"[{a} for b in {n}]", inner, NAMES),
            st.builds(lambda a, o, b: f"{a} {o} {b}", inner,
                      st.sampled_from(["+", "-", "*", "and", "or", "<", "@", "if x else"]),
                      inner),
            st.builds(lambda a: f"(lambda p, q: {a})", inner),
            st.builds(lambda f, a, b: f"{f}(lambda p, q: {a}, {b})", NAMES, inner, inner),
        )
    return st.recursive(NAMES, extend, max_leaves=24)


STATEMENTS = st.builds(
    lambda form, e, f, depth: textwrap.indent(form.format(e=e, f=f), UNIT * depth),
    st.sampled_from(["y = {e}\n", "return {e}\n", "{e}\n", "z += {e}\n", "a, b = {e}, {f}\n",
                     "with {e} as w:\n    pass\n", "y = {e}  # a comment\n"]),
    _expressions(), _expressions(), st.integers(0, 3))


@settings(max_examples=300, deadline=None)
@given(STATEMENTS, st.integers(40, 100))
def test_generated_statements_keep_their_program_and_shrink(code: str, limit: int) -> None:
    """Whatever the statement, the wrapping keeps its `ast`, never lengthens a line and wraps
    every assignment or `return` past the limit that has brackets (a second run reads the
    first's lines as the author's: the fixtures' second runs check that)."""
    text = "def f():\n" + textwrap.indent(code, UNIT)
    fitted = line_fitter("", limit, UNIT)(text)
    assert ast.dump(ast.parse(fitted)) == ast.dump(ast.parse(text))
    assert max(map(len, fitted.splitlines())) <= max(map(len, text.splitlines()))
    first = text.splitlines()[1].strip()
    splittable = first.startswith(("y =", "return", "z +=", "a, b =")) and "(" in first
    if len(text.splitlines()[1]) > limit and splittable:
        assert fitted != text


@pytest.mark.parametrize(("wrapped", "original", "expected"), [
    ("def f():\n    d_loss = (\n        a.mean() + b.mean()\n    )\n", "",
     "def f():\n    d_loss = a.mean() + b.mean()\n"),
    ("from m import (\n    a,\n)\n", "", "from m import (\n    a,\n)\n"),  # a trailing comma
    ("from m import (\n    a\n)\n", "", "from m import a\n"),
    ("x = f(\n    a, b\n)\n", "", "x = f(a, b)\n"),
    ("x = f(\n    a, b\n)\n", "x = f(\n    a, b\n)\n", "x = f(\n    a, b\n)\n"),  # the author's
    ("x = f(\n    a,\n    b,\n)\n", "", "x = f(\n    a,\n    b,\n)\n"),  # black keeps it too
    ("x = f(\n    aaaaaaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbbbbbb\n)\n", "",
     "x = f(\n    aaaaaaaaaaaaaaaaaaaa, bbbbbbbbbbbbbbbbbbbb\n)\n"),  # past the limit
    ("x = f(  # why\n    a\n)\n", "", "x = f(  # why\n    a\n)\n"),  # a comment inside
])
def test_o0_joins_the_statements_it_changed_where_they_fit(
    wrapped: str, original: str, expected: str
) -> None:
    assert line_joiner(original, 40)(wrapped) == expected


ACCELERATE = """\
import torch
from accelerate import Accelerator


def main(args, model, dataloader):
    accelerator = Accelerator(gradient_accumulation_steps=args.accumulation, log_with="all")
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate_of_the_model)
    model, optimizer, dataloader = accelerator.prepare(model, optimizer, dataloader)
    for batch in dataloader:
        with accelerator.accumulate(model):
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
"""


@pytest.mark.parametrize("length", [79, 88, 100])
def test_the_arguments_added_to_an_accelerator_keep_to_the_configured_length(
    tmp_path: Path, length: int
) -> None:
    """The issue's shape: `Accelerator(...)` with the framework's switch added was 121
    columns against a configured 100."""
    (tmp_path / "pyproject.toml").write_text(f"[tool.ruff]\nline-length = {length}\n")
    script = tmp_path / "train.py"
    script.write_text(ACCELERATE)
    result = CliRunner().invoke(main, [str(script)])
    assert result.exit_code in (0, 1), result.output
    rewritten = script.read_text()
    assert "mixed_precision=" in rewritten
    own = set(ACCELERATE.splitlines())
    assert [line for line in rewritten.splitlines()
            if len(line) > length and line not in own] == []
