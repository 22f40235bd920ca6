"""Jupyter notebooks: the fixture notebooks rewritten exactly, byte-identical round trips,
layouts kept, cells that stay out, findings that name cells, and the command line's outputs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from click.testing import CliRunner
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from amprewrite.cli import main
from amprewrite.install_source import install_command
from amprewrite.notebooks import rewrite_notebook
from amprewrite.options import Options

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures" / "notebooks"
CASES = sorted(path.parent.name for path in FIXTURES.glob("*/input.ipynb"))


def _run(*args: str, stdin: bytes | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), input=stdin)
    assert "Traceback" not in result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def _jupyter(notebook: nbformat.NotebookNode) -> bytes:
    """The bytes Jupyter saves: nbformat's JSON and a final newline."""
    return (nbformat.writes(notebook) + "\n").encode()


def _notebook(*sources: str, markdown: tuple[int, ...] = ()) -> nbformat.NotebookNode:
    cells = [new_markdown_cell(source, id=f"c{n}") if n in markdown else
             new_code_cell(source, id=f"c{n}") for n, source in enumerate(sources)]
    return new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3",
                                                              "display_name": "Python 3",
                                                              "language": "python"}})


def _cells(source: bytes) -> list[str]:
    return [cell.source for cell in nbformat.reads(source.decode(), as_version=4).cells]


TRAINING_CELLS = (
    "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F",
    "model = nn.Linear(4, 2)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
    "for step in range(3):\n    x = torch.randn(8, 4)\n    y = torch.randint(0, 2, (8,))\n"
    "    optimizer.zero_grad()\n    out = model(x)\n    loss = F.cross_entropy(out, y)\n"
    "    loss.backward()\n    optimizer.step()",
)


# --- the fixture notebooks ---------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES)
def test_fixture_is_rewritten_exactly(case: str, request: pytest.FixtureRequest) -> None:
    directory = FIXTURES / case
    result = rewrite_notebook((directory / "input.ipynb").read_bytes(), Options())
    findings = "".join(f.format("input.ipynb") + "\n" for f in result.findings)
    if request.config.getoption("--update-fixtures"):
        (directory / "expected_O1.ipynb").write_bytes(result.source)
        (directory / "findings_O1.txt").write_text(findings)
    assert result.source.decode() == (directory / "expected_O1.ipynb").read_text()
    assert findings == (directory / "findings_O1.txt").read_text()


@pytest.mark.parametrize("case", CASES)
def test_fixture_rewrite_changes_only_sources_as_jupyter_writes_them(case: str) -> None:
    """The input with the expected sources put in, written by nbformat, is the expected file
    byte for byte: cell order and ids, outputs, counts and metadata are untouched."""
    directory = FIXTURES / case
    notebook = nbformat.read(directory / "input.ipynb", as_version=nbformat.NO_CONVERT)
    expected = (directory / "expected_O1.ipynb").read_bytes()
    for cell, source in zip(notebook.cells, _cells(expected), strict=True):
        cell.source = source
    assert _jupyter(notebook) == expected
    assert (directory / "input.ipynb").read_bytes() == _jupyter(
        nbformat.read(directory / "input.ipynb", as_version=nbformat.NO_CONVERT))


@pytest.mark.parametrize("case", CASES)
def test_fixture_second_run_changes_nothing(case: str) -> None:
    expected = (FIXTURES / case / "expected_O1.ipynb").read_bytes()
    again = rewrite_notebook(expected, Options())
    assert again.source == expected and not again.changed


def test_one_scaler_created_in_the_cell_that_builds_the_optimizer() -> None:
    cells = _cells((FIXTURES / "split_cells" / "expected_O1.ipynb").read_bytes())
    made = [n for n, source in enumerate(cells, 1) if "GradScaler()" in source]
    assert made == [5]  # cell 5 (markdown cells count): the model and optimizer
    assert cells[4].endswith("optimizer = torch.optim.SGD(model.parameters(), lr=0.5)\n"
                             "scaler = GradScaler()")
    assert "from amprewrite_runtime import GradScaler, autocast" in cells[1]  # the imports
    assert '"scaler": scaler.state_dict()' in cells[7]  # the checkpoint, three cells later


def test_ipython_syntax_in_the_training_cell_is_kept() -> None:
    before = _cells((FIXTURES / "magics" / "input.ipynb").read_bytes())
    after = _cells((FIXTURES / "magics" / "expected_O1.ipynb").read_bytes())
    assert after[5].startswith("%%time\n")
    assert '            !echo "batch {batch}: forward done"\n' in after[5]  # moved into the region
    assert '    !echo "epoch {epoch} done" \\\n          "(a continued shell line)"\n' in after[5]
    assert after[5].endswith("\n    /print epoch, loss.item()")
    for number in (1, 2, 4, 7, 8):  # markdown, magics only, %%bash, broken, auto-call
        assert after[number - 1] == before[number - 1]
    assert after[2].endswith("files = !ls\nlisting = %sx ls -a")
    assert "model?\n" in after[4] and after[4].endswith("scaler = GradScaler()\n??optimizer.step")


def test_an_autocast_region_across_cells_is_reopened_in_each() -> None:
    cells = _cells((FIXTURES / "toplevel_step" / "expected_O1.ipynb").read_bytes())
    assert cells[4] == "with autocast():\n    outputs = model(inputs)\noutputs.shape"
    assert cells[6] == "with autocast():\n    loss = F.cross_entropy(outputs, labels)\nloss"
    notebook = nbformat.read(FIXTURES / "toplevel_step" / "expected_O1.ipynb", as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            compile(cell.source, "<cell>", "exec")  # each cell on its own, as the kernel runs it


def _as_cells(script: str) -> list[nbformat.NotebookNode]:
    """A script cut into cells at its top-level statements, as notebooks are written: a
    markdown cell before every third, `%%time` on loops, shell lines before and after some."""
    import ast
    import itertools

    starts = sorted({min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
                     for node in ast.parse(script).body})
    lines = script.splitlines(keepends=True)
    cuts = [1, *starts[1:], len(lines) + 1]
    cells = []
    for number, (start, end) in enumerate(itertools.pairwise(cuts)):
        source = "".join(lines[start - 1:end - 1]).strip("\n")
        if number % 3 == 2:
            cells.append(new_markdown_cell("Next:"))
        if source.startswith(("for ", "while ")):
            source = "%%time\n" + source
        elif number % 5 == 4 and not source.startswith("from __future__"):
            source = "!echo start\n" + source
        if number % 4 == 3:
            source += "\n%time _ = 1"
        cells.append(new_code_cell(source))
    return cells


SCRIPTS = sorted(p.parent.name for p in (ROOT / "fixtures").glob("*/findings_O1.txt"))


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_fixture_script_cut_into_cells_is_rewritten_alike(name: str) -> None:
    """The cells are one program: a fixture script as a notebook gets the script's findings,
    changes when the script does, and every cell of the result stands on its own."""
    from amprewrite.ipython_syntax import Masker

    directory = ROOT / "fixtures" / name
    try:
        cells = _as_cells((directory / "input.py").read_text())
    except SyntaxError:
        pytest.skip("the fixture is not Python 3")
    result = rewrite_notebook(_jupyter(new_notebook(cells=cells)), Options())
    expected = [line.split(" ")[1] for line in (directory / "findings_O1.txt").read_text()
                .splitlines()]
    assert sorted(f.code for f in result.findings) == sorted(expected)
    assert result.changed == (directory / "expected_O1.py").exists()
    for number, cell in enumerate(nbformat.reads(result.source.decode(), 4).cells, 1):
        if cell.cell_type == "code":
            compile(Masker("__mask_").mask(cell.source), f"cell {number}", "exec")


# --- round trips and layouts -------------------------------------------------------------------

def test_a_notebook_with_nothing_to_do_is_byte_identical(tmp_path: Path) -> None:
    notebook = _notebook("# Plots\n\nNo training here: café, 学习, 🚀.", "%matplotlib inline\n"
                         "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])",
                         "!ls\nx = 1\nx?", markdown=(0,))
    notebook.cells[1].outputs = [new_output("stream", name="stdout", text="ok — fine\n")]
    notebook.cells[1].execution_count = 7
    path = tmp_path / "plots.ipynb"
    path.write_bytes(_jupyter(notebook))
    original = path.read_bytes()
    assert rewrite_notebook(original, Options()).source == original
    code, _, err = _run(str(path))
    assert code == 0 and path.read_bytes() == original
    assert err.strip() == "1 file left unchanged"


def test_a_notebook_that_already_uses_amp_is_byte_identical() -> None:
    source = (FIXTURES / "split_cells" / "expected_O1.ipynb").read_bytes()
    result = rewrite_notebook(source, Options())
    assert result.source == source
    assert result.findings[0].format("nb").startswith("nb:1:1: AMP002 ")


def _dump(document: dict, style: str) -> str:
    if style == "indent2-unsorted":
        return json.dumps(document, indent=2) + "\n"
    if style == "compact":
        return json.dumps(document)
    if style == "compact-tight":
        return json.dumps(document, separators=(",", ":"))
    if style == "ascii":
        return json.dumps(document, indent=1, sort_keys=True, ensure_ascii=True) + "\n"
    raise AssertionError(style)


@pytest.mark.parametrize("style", ["indent2-unsorted", "compact", "compact-tight", "ascii"])
@pytest.mark.parametrize("joined", [False, True], ids=["source-lists", "source-strings"])
def test_another_tools_layout_is_kept(style: str, joined: bool) -> None:
    """Written by VS Code, Colab or a script: only the changed sources differ, in that
    layout (indentation, key order, separators, escaped non-ASCII, one string per source)."""
    document = json.loads(_jupyter(_notebook("# Entraîner ✓", *TRAINING_CELLS,
                                             markdown=(0,))))
    for cell in document["cells"]:
        cell["source"] = "".join(cell["source"]) if joined else cell["source"]
    result = rewrite_notebook(_dump(document, style).encode(), Options())
    for cell, source in zip(document["cells"], _cells(result.source), strict=True):
        cell["source"] = source if joined else source.splitlines(True)
    assert result.changed
    assert result.source.decode() == _dump(document, style)


# --- IPython syntax ----------------------------------------------------------------------------

IPYTHON_LINES = [
    "%matplotlib inline", "%%time", "!pip install torch", "!!ls", "files = !ls",
    "out = %timeit -o f()", 'd["k"] = !ls', "model?", "model.step??", "?model", "??model",
    "/print a", ",print a b", ";print a b", "%time x = f(1,", "x = f(?)",
]


@pytest.mark.parametrize("line", IPYTHON_LINES)
def test_ipython_lines_are_masked_and_restored_exactly(line: str) -> None:
    from amprewrite.ipython_syntax import Masker

    masker = Masker("__mask_")
    source = f"import torch\nfor i in range(2):\n    {line}\n    y = i\n{line}\n"
    masked = masker.mask(source)
    compile(masked, "<cell>", "exec")
    assert line not in masked
    assert masker.unmask(masked, masker.names_in(masked)) == source


PYTHON_LINES = [
    "x = (1\n     % 2)", 's = """\n!not a command\n%not a magic\n"""', "a = b % c", "x != y",
    'print("?")', "y = 1  # why?", "z = [\n    !x\n]", "w = 1 \\\n    ;", "v == !u",
    "t = 'it''s'", "q = f'{x!r}'",
]


@pytest.mark.parametrize("source", PYTHON_LINES)
def test_python_is_never_masked(source: str) -> None:
    from amprewrite.ipython_syntax import Masker

    assert Masker("__mask_").mask(source) == source


@pytest.mark.parametrize(("source", "magic"), [
    ("%%time\nx = 1", "time"), ("\n\n%%bash\nls", "bash"), ("x = 1\n%%time", None),
    ("%time x = 1", None), ("  %%capture out\nx", "capture"),
])
def test_cell_magic(source: str, magic: str | None) -> None:
    from amprewrite.ipython_syntax import cell_magic

    assert cell_magic(source) == magic


def test_a_continued_command_moved_into_a_block_keeps_its_continuation() -> None:
    from amprewrite.ipython_syntax import Masker

    masker = Masker("__mask_")
    masked = masker.mask("!echo a \\\n  b \\\n  c\nx = 1\n")
    moved = "".join("    " + line for line in masked.splitlines(True))
    assert masker.unmask(moved, masker.names_in(masked)) == (
        "    !echo a \\\n  b \\\n  c\n    x = 1\n")
    assert masker.unmask(masked.replace('"__mask_1"', "pass"), masker.names_in(masked)) is None


# --- cells left out ----------------------------------------------------------------------------

def test_a_cell_that_cannot_be_parsed_is_left_alone_and_the_rest_rewritten() -> None:
    source = _jupyter(_notebook("# Train", TRAINING_CELLS[0], "def broken(:\n    pass",
                                *TRAINING_CELLS[1:], "%%bash\nif [ x ]; then echo; fi",
                                markdown=(0,)))
    result = rewrite_notebook(source, Options())
    before, after = _cells(source), _cells(result.source)
    assert after[2] == before[2] and after[5] == before[5]
    assert "scaler.scale(loss).backward()" in after[4]
    shown = [f.format("t.ipynb") for f in result.findings]
    assert "t.ipynb:cell 3:1:12: AMP005 cannot parse: invalid syntax; cell left unchanged" in shown
    assert not any(":cell 6:" in line for line in shown)  # %%bash: not Python, no finding


def test_a_cell_the_program_cannot_hold_is_left_alone() -> None:
    source = _jupyter(_notebook(TRAINING_CELLS[0], "from __future__ import annotations",
                                *TRAINING_CELLS[1:]))
    result = rewrite_notebook(source, Options())
    shown = [f.format("t.ipynb") for f in result.findings]
    assert shown[0] == ("t.ipynb:cell 2:1:1: AMP005 cannot parse: from __future__ imports must "
                        "occur at the beginning of the file; cell left unchanged")
    assert "scaler.step(optimizer)" in _cells(result.source)[3]


def test_a_first_statement_the_rewrite_replaces_keeps_its_cell() -> None:
    """apex's `amp.initialize(...)`, alone in its cell, becomes the scaler there; the cell
    that imported apex loses that import, not its other lines."""
    source = _jupyter(_notebook(
        "from apex import amp\nimport torch", "model = torch.nn.Linear(4, 2).cuda()\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
        "model, optimizer = amp.initialize(model, optimizer, opt_level='O1')",
        "for i in range(3):\n    loss = model(torch.randn(2, 4).cuda()).sum()\n"
        "    with amp.scale_loss(loss, optimizer) as scaled_loss:\n        scaled_loss.backward()\n"
        "    optimizer.step()"))
    cells = _cells(rewrite_notebook(source, Options()).source)
    assert cells[0] == "import torch\nfrom amprewrite_runtime import GradScaler, autocast"
    assert cells[2] == "scaler = GradScaler()"
    assert "scaler.scale(loss).backward()" in cells[3]


def test_a_cell_only_libcst_refuses_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPython parses it, libcst does not (the engine's AMP003): that cell is taken out and
    the program rewritten again without it."""
    from amprewrite import engine
    from amprewrite.engine import RewriteError
    from amprewrite.findings import CANNOT_PARSE, Finding

    real = engine.rewrite_source

    def picky(source: bytes, options: Options) -> engine.RewriteResult:
        if b"new_syntax" in source:
            line = source[:source.index(b"new_syntax")].count(b"\n") + 1
            raise RewriteError(Finding(CANNOT_PARSE, line, 1, "cannot parse (this Python "
                                       "syntax is not supported by libcst); file left unchanged"))
        return real(source, options)

    monkeypatch.setattr(engine, "rewrite_source", picky)
    source = _jupyter(_notebook(TRAINING_CELLS[0], "x = 1\nnew_syntax = 2", *TRAINING_CELLS[1:]))
    result = rewrite_notebook(source, Options())
    assert result.findings[0].format("t") == ("t:cell 2:2:1: AMP005 cannot parse (this Python "
                                              "syntax is not supported by libcst); cell left "
                                              "unchanged")
    assert "scaler = GradScaler()" in _cells(result.source)[2]


def test_a_rewrite_that_cannot_be_cut_into_cells_leaves_the_notebook_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from amprewrite import engine
    from amprewrite.engine import RewriteResult

    def across(source: bytes, options: Options) -> RewriteResult:  # a block no cell can hold
        body = "".join("    " + line for line in source.decode().splitlines(True))
        return RewriteResult(b"with open('f'):\n" + body.encode(), [], True)

    monkeypatch.setattr(engine, "rewrite_source", across)
    path = tmp_path / "t.ipynb"
    path.write_bytes(_jupyter(_notebook(*TRAINING_CELLS)))
    before = path.read_bytes()
    code, _, err = _run(str(path))
    assert code == 123 and path.read_bytes() == before
    assert err.startswith(f"{path}:1:1: AMP004 internal error: the rewrite cannot be split back "
                          "into cells (the rewrite opened a block across cells (`with open('f'):"
                          "`)); file left unchanged, please report it")


# --- the command line --------------------------------------------------------------------------

@pytest.fixture
def notebook(tmp_path: Path) -> Path:
    path = tmp_path / "train.ipynb"
    path.write_bytes((FIXTURES / "split_cells" / "input.ipynb").read_bytes())
    return path


def test_diff_shows_each_changed_cell_and_writes_nothing(notebook: Path) -> None:
    before = notebook.read_bytes()
    code, out, err = _run("--diff", str(notebook))
    assert code == 1 and notebook.read_bytes() == before
    headers = re.findall(r"^--- (.*)$", out, re.M)
    assert headers == [f"{notebook}:cell {n}" for n in (2, 5, 7, 8)]
    assert f"+++ {notebook}:cell 5\n@@ -1,2 +1,3 @@\n" in out
    assert "No newline at end of file" not in out
    assert f"{notebook}:cell 7:6:5: AMP101 forward pass and loss would be wrapped" in err


def test_check_fails_and_a_run_rewrites_in_place(notebook: Path) -> None:
    assert _run("--check", "-q", str(notebook))[0] == 1
    code, _, err = _run(str(notebook))
    assert code == 1 and "1 file rewritten" in err
    assert notebook.read_bytes() == (FIXTURES / "split_cells" / "expected_O1.ipynb").read_bytes()
    assert _run("--check", str(notebook))[0] == 0


def test_json_output_names_cells(notebook: Path) -> None:
    broken = notebook.with_name("broken.ipynb")
    broken.write_text("{")
    code, out, _ = _run("--check", "--output-format", "json", str(notebook), str(broken))
    failed, entry = json.loads(out)["files"]
    assert code == 123 and entry["status"] == "would be rewritten"
    assert failed["findings"][0]["cell"] is None  # a finding on the whole notebook
    assert entry["findings"][0] == {
        "code": "AMP100", "cell": 5, "line": 2, "column": 1, "severity": "change",
        "message": "grad scaler `scaler` would be created right after the optimizer is built",
        "url": None}
    assert {f["cell"] for f in entry["findings"]} == {5, 7, 8}


def test_github_annotations_point_at_the_line_of_the_file(notebook: Path) -> None:
    _, out, _ = _run("--check", "--output-format", "github", str(notebook))
    lines = notebook.read_text().splitlines()
    annotation = next(line for line in out.splitlines() if "title=AMP101" in line)
    match = re.match(r"::error file=(.*),line=(\d+),col=1,endLine=\2,endColumn=1,"
                     r"title=AMP101 [^:]*::cell 7:6:5: forward pass", annotation)
    assert match is not None, annotation
    assert lines[int(match[2]) - 1] == '    "    logits = model(x)\\n",'


def test_inline_ignores_select_and_ignore_work_in_cells(tmp_path: Path) -> None:
    cells = list(TRAINING_CELLS)
    cells[2] = cells[2].replace("    optimizer.step()", "    optimizer.step()  # amprewrite: "
                                "ignore[AMP104]")
    path = tmp_path / "t.ipynb"
    path.write_bytes(_jupyter(_notebook(*cells)))
    code, _, err = _run("--check", str(path))
    assert ": AMP104 " not in err and code == 0  # not routed, so nothing else is made either
    assert (f"{path}:cell 3:8:5: AMP012 edits withheld: once AMP104 is ignored at "
            "`optimizer.step()`, AMP708") in err
    assert f"{path}:cell 3:7:5: AMP011 `loss.backward()` (backward) is left unchanged with the " \
           "rest of its training step: AMP012 at cell 3:8 says why" in err  # not the program's
    path.write_bytes(_jupyter(_notebook(*TRAINING_CELLS)))
    code, _, err = _run("--check", "--select", "AMP10", "--ignore", "AMP101", str(path))
    assert code == 1 and "AMP100" in err and "AMP105" in err and "AMP101" not in err
    diff = _run("--diff", "--select", "AMP10", "--ignore", "AMP101", str(path))[1]
    assert "scaler.scale(loss).backward()" in diff and "autocast" not in diff


def test_directory_walks_take_notebooks_unless_include_says_otherwise(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    for name in ("a/train.ipynb", "b/train.py", ".ipynb_checkpoints/train-checkpoint.ipynb"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "a/train.ipynb").write_bytes(_jupyter(_notebook(*TRAINING_CELLS)))
    (tmp_path / ".ipynb_checkpoints/train-checkpoint.ipynb").write_bytes(b"{}")
    (tmp_path / "b/train.py").write_text("\n".join(TRAINING_CELLS) + "\n")
    err = _run("--check", str(tmp_path))[2]
    assert "a/train.ipynb:cell 3:" in err and "b/train.py:" in err and "checkpoint" not in err
    assert err.splitlines()[-1] == "2 files would be rewritten"
    err = _run("--check", "--include", r"\.py$", str(tmp_path))[2]
    assert "train.ipynb" not in err and err.splitlines()[-1] == "1 file would be rewritten"
    (tmp_path / "pyproject.toml").write_text('[tool.amprewrite]\ninclude = "\\\\.py$"\n')
    assert "train.ipynb" not in _run("--check", str(tmp_path))[2]
    assert "train.ipynb" in _run("--check", str(tmp_path / "a" / "train.ipynb"))[2]


def test_standard_input_is_a_notebook_when_its_name_says_so() -> None:
    source = _jupyter(_notebook(*TRAINING_CELLS))
    code, out, err = _run("--stdin-filename", "nb.ipynb", "-", stdin=source)
    assert code == 1 and "nb.ipynb:cell 2:2:1: AMP100" in err
    assert "scaler = GradScaler()" in _cells(out.encode())[1]


@pytest.mark.parametrize(("content", "message"), [
    (b'{"cells": [', "AMP004 not a Jupyter notebook (Expecting value: line 1 column 12"),
    (b"[1, 2]", "AMP004 not a Jupyter notebook (not a JSON object)"),
    (b'{"cells": []}', "AMP004 not a Jupyter notebook (no nbformat version)"),
    (b'{"nbformat": 3, "nbformat_minor": 0, "worksheets": [], "metadata": {}}',
     "AMP004 nbformat 3 notebook: amprewrite reads nbformat 4"),
    (b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "code"}]}',
     "AMP004 not a Jupyter notebook (The notebook is invalid and is missing an expected key: "
     "metadata)"),
    (b'{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "code", '
     b'"metadata": {}, "outputs": [], "execution_count": null}]}',
     "AMP004 not a Jupyter notebook (a cell without a type or a source)"),
    (b'{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5, "x": "\xff"}',
     "AMP004 cannot decode: a notebook is UTF-8 JSON"),
])
def test_a_bad_notebook_is_reported_and_left_alone(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "bad.ipynb"
    path.write_bytes(content)
    code, _, err = _run(str(path))
    assert code == 123 and path.read_bytes() == content
    assert err.startswith(f"{path}:1:1: {message}"), err
    assert "file left unchanged" in err.splitlines()[0]


def test_a_read_only_notebook_is_reported_not_written(notebook: Path) -> None:
    before = notebook.read_bytes()
    notebook.chmod(0o444)
    code, _, err = _run(str(notebook))
    assert code == 123 and notebook.read_bytes() == before
    assert f"{notebook}:1:1: AMP004 cannot write: permission denied" in err


def test_a_python_run_never_loads_nbformat(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("\n".join(TRAINING_CELLS) + "\n")
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "amprewrite", "--check",
                           str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 1, done.stderr
    loaded = re.findall(r"\|\s+(\S+)$", done.stderr, re.M)
    assert "libcst" in loaded and "amprewrite.engine" in loaded
    assert "nbformat" not in loaded and "amprewrite.notebooks" not in loaded


# --- pre-commit ---------------------------------------------------------------------------------

def test_both_hooks_take_scripts_and_notebooks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pre-commit's own manifest loader and file classifier pick the staged files each hook
    gets; the hook's entry then runs on them as pre-commit would."""
    import shlex

    from pre_commit.clientlib import load_manifest
    from pre_commit.commands.run import Classifier

    monkeypatch.chdir(tmp_path)
    notebook = _jupyter(_notebook(*TRAINING_CELLS))
    staged = {"train.py": "\n".join(TRAINING_CELLS).encode() + b"\n", "train.ipynb": notebook,
              "README.md": b"# notes\n", "data.json": b"{}\n"}
    for name, content in staged.items():
        Path(name).write_bytes(content)
    hooks = {hook["id"]: hook for hook in load_manifest(ROOT / ".pre-commit-hooks.yaml")}
    for hook in hooks.values():
        taken = Classifier(list(staged)).by_types(list(staged), hook["types"], hook["types_or"],
                                                  hook["exclude_types"])
        assert list(taken) == ["train.py", "train.ipynb"], hook["id"]
    for hook_id in ("amprewrite-check", "amprewrite"):
        entry = shlex.split(hooks[hook_id]["entry"])
        done = subprocess.run([sys.executable, "-m", *entry, "train.py", "train.ipynb"],
                              capture_output=True, text=True, check=False)
        assert done.returncode == 1, done.stderr
        assert "train.ipynb:cell 2:2:1: AMP100" in done.stderr
    assert "scaler = GradScaler()" in _cells(Path("train.ipynb").read_bytes())[1]


# --- documentation -----------------------------------------------------------------------------

def _console(page: Path, command: str) -> list[str]:
    """The output shown under `$ command` in the first console block of `page` with it."""
    text = page.read_text()
    start = text.index(f"$ {command}\n") + len(f"$ {command}\n")
    return text[start:text.index("```", start)].rstrip("\n").split("\n")


@pytest.mark.parametrize(("page", "case"), [("README.md", "split_cells"),
                                            ("docs/notebooks.md", "toplevel_step")])
def test_the_documented_notebook_run_is_what_amprewrite_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, page: str, case: str
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("train.ipynb").write_bytes((FIXTURES / case / "input.ipynb").read_bytes())
    done = subprocess.run([sys.executable, "-m", "amprewrite", "--diff", "train.ipynb"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          check=False)
    assert done.returncode == 1
    shown = [line.replace("pip install '.[runtime]'", install_command())  # run in the clone
             for line in _console(ROOT / page, "amprewrite --diff train.ipynb")]
    assert done.stdout.rstrip("\n").split("\n") == shown
