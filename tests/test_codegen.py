"""The fast code generation agrees with libcst's own: positions with PositionProvider, text
with Module.code, and the spliced rendering of a rewrite with rendering it whole."""

from __future__ import annotations

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from amprewrite import codegen, engine
from amprewrite.analysis.tree import descendants
from amprewrite.codegen import locate, render, render_module
from amprewrite.engine import rewrite_source
from amprewrite.options import Options
from amprewrite.rules import snippets
from tests.execution import FIXTURES_DIR
from tests.test_tree import EVERY_SHAPE

NEWLINE_STYLES = {"\\n": "\n", "\\r\\n": "\r\n", "\\r": "\r"}
INPUTS = sorted(FIXTURES_DIR.glob("*/input.py"))


def _expected_starts(module: cst.Module) -> dict[cst.CSTNode, tuple[int, int]]:
    ranges = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    return {node: (where.start.line, where.start.column) for node, where in ranges.items()}


def _assert_same_layout(source: str) -> None:
    module = cst.parse_module(source)
    nodes = list(descendants(module))
    expected = _expected_starts(module)
    layout = locate(module, nodes)
    assert layout.starts == {node: expected[node] for node in nodes}
    assert layout.length == len(module.code)
    pieces = [module.code[start:end] for start, end in layout.spans]
    statements = [module.code_for_node(statement) for statement in module.body]
    if not module.has_trailing_newline:  # the last statement's newline is not in the file
        statements[-1] = statements[-1][: len(pieces[-1])]
    assert pieces == statements


@pytest.mark.parametrize("path", INPUTS, ids=str)
def test_every_node_of_every_fixture(path) -> None:
    _assert_same_layout(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("newline", NEWLINE_STYLES.values(), ids=NEWLINE_STYLES.keys())
def test_every_shape_with_each_newline_style(newline: str) -> None:
    _assert_same_layout(EVERY_SHAPE.replace("\n", newline))


def test_an_indented_block_starts_at_its_first_statement() -> None:
    module = cst.parse_module("if x:\n    # comment\n\n    y = 1\n")
    block = module.body[0].body
    assert locate(module, [block]).starts == {block: (4, 4)}


RENDERED = [EVERY_SHAPE, "if x:\n\ty = (1,\n\t\t2)\n", "x = 1", "", "# only\n"]


@pytest.mark.parametrize("source", RENDERED)
def test_render_is_libcst_code(source: str) -> None:
    module = cst.parse_module(source)
    assert render(module, module) == module.code
    for statement in module.body:
        assert render(statement, module) == module.code_for_node(statement)


class _ChangeEveryOther(cst.CSTTransformer):
    """Replace every other top-level statement and add one after it, as a rewrite might."""

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        body: list[cst.BaseStatement] = []
        for index, statement in enumerate(original_node.body):
            if index % 2:
                body.append(statement)
                continue
            comment = cst.EmptyLine(comment=cst.Comment("# changed"))
            body.append(statement.with_changes(leading_lines=[comment, *statement.leading_lines]))
            body.append(cst.parse_statement("added = 1\n"))
        return original_node.with_changes(body=body)


SPLICED = [EVERY_SHAPE.replace("\n", newline) for newline in NEWLINE_STYLES.values()] + [
    "# header\n\n\nimport x\n# footer\n\n",
    "\ufeffimport x\n# BOM\n",
    "# -*- coding: latin-1 -*-\nname = 'caf\xe9'\n",
    "x = 1",  # no trailing newline: rendered whole
]


@pytest.mark.parametrize("source", SPLICED)
def test_splicing_gives_what_rendering_whole_gives(source: str) -> None:
    encoding = "latin-1" if "latin-1" in source else "utf-8-sig" if "\ufeff" in source else "utf-8"
    data = source.removeprefix("\ufeff").encode(encoding)
    module = cst.parse_module(data)
    changed = module.visit(_ChangeEveryOther())
    layout = locate(module, [])
    assert render_module(changed, module, layout, data) == changed.bytes
    assert render_module(module, module, layout, data) == data


@pytest.mark.parametrize("path", INPUTS, ids=str)
def test_rewrites_are_spliced(path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fixture's rewrite takes the splicing path, and it renders what libcst would."""
    whole: list[bytes] = []
    real_render = codegen.render

    def counting_render(node: cst.CSTNode, module: cst.Module) -> str:
        if isinstance(node, cst.Module):
            whole.append(b"")
        return real_render(node, module)

    monkeypatch.setattr(codegen, "render", counting_render)
    rewrite_source(path.read_bytes(), Options())
    assert whole == []


SNIPPETS = [
    "scaler.scale", "self.scaler.step", "autocast()", "a", "amp_device", "None",
    "torch.autocast(amp_device)", "scaler.scale(loss)", "lambda: 1", "x.if_", "not_a.call(1)",
]
STATEMENTS = [
    "scaler.update()", "scaler = GradScaler()", "self.scaler = GradScaler()",
    "from amprewrite_runtime import GradScaler, autocast", "scaler = GradScaler(enabled=x)",
    "a.b = c.d()", "x = 1", "import torch", "print()",
]


@pytest.mark.parametrize("code", SNIPPETS)
def test_built_expressions_equal_parsed_ones(code: str) -> None:
    config = cst.parse_module(b"x = 1\r\n").config_for_parsing
    assert snippets.expression(code, config).deep_equals(cst.parse_expression(code, config))


@pytest.mark.parametrize("code", STATEMENTS)
def test_built_statements_equal_parsed_ones(code: str) -> None:
    config = cst.parse_module(b"def f():\n\tpass\n").config_for_parsing
    assert snippets.statement(code, config).deep_equals(cst.parse_statement(code, config))


@pytest.mark.parametrize("source", [EVERY_SHAPE.encode(), *(p.read_bytes() for p in INPUTS)],
                         ids=["every shape", *map(str, INPUTS)])
def test_the_unvalidated_parse_builds_the_validated_tree(source: bytes) -> None:
    """The engine's parse skips libcst's per-node validation; the tree is the same (the
    syntax sample is parsed without the engine's CPython compile, which refuses some of it)."""
    with engine._unvalidated():
        unvalidated = cst.parse_module(source)
    assert unvalidated.deep_equals(cst.parse_module(source))


def test_validation_is_back_after_a_parse_that_succeeds_or_fails() -> None:
    engine.parse(b"x = 1\n")
    with pytest.raises(cst.CSTValidationError):
        cst.SimpleWhitespace("not whitespace")
    with pytest.raises(engine.RewriteError):
        engine.parse(b"x = (\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("")


def test_subscript_keys_read_off_plain_indexes_match_the_rendered_ones() -> None:
    """`receiver_key` reads `optimizers[0]`'s index off the node; every subscript of the
    fixture inputs and of the every-shape sample gives the key rendering it would give."""
    from amprewrite.analysis import names

    checked = 0
    for source in [*(path.read_text(encoding="utf-8") for path in INPUTS), EVERY_SHAPE,
                   "a[0], a[i], a[(0)], a[ 0 ], a[0,], a[*x], a[-1], a[i:j], a['k'], a[0, 1]\n"]:
        for node in descendants(cst.parse_module(source)):
            if type(node) is cst.Subscript:
                element = node.slice[0]
                assert names._index_code(element) == cst.Module([]).code_for_node(element)
                checked += 1
    assert checked > 100
