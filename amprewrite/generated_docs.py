"""The generated documentation: docs/findings.md's table of every code, docs/rules.md
(every recipe's rules with their codes and examples) and docs/ops.md (the op table).
`python -m amprewrite.generated_docs` regenerates them, from the repository root."""

from __future__ import annotations

from pathlib import Path

from amprewrite.analysis.dtype import ops
from amprewrite.code_index import codes
from amprewrite.explain import example_diff
from amprewrite.options import Options
from amprewrite.recipes import recipes

COMMAND = "python -m amprewrite.generated_docs"


def findings_table() -> str:
    """The Markdown table of every code, as docs/findings.md shows it: each row with its
    code's anchor (`#AMP212`), where docs URLs point (`catalog.default_docs_url`)."""
    rows = ["| code | severity | what | why it fires | what to do |",
            "| --- | --- | --- | --- | --- |"]
    rows += [f"| {code_anchor(c.id)}{c.id} | {c.severity.value} | {c.title} | {c.why} | "
             f"{c.advice} |" for c in codes().values()]
    return "\n".join(rows) + "\n"


def code_anchor(code_id: str) -> str:
    """The anchor of a code's row: its id as it is, so that `#{code}` finds it."""
    return f'<a id="{code_id}"></a>'


TABLE_START = f"<!-- generated from amprewrite.catalog: {COMMAND} -->\n"
TABLE_END = "<!-- end of generated table -->\n"


def with_table(page: str) -> str:
    """`page` with the text between the generated-table markers replaced by the table."""
    head, _, rest = page.partition(TABLE_START)
    _, _, tail = rest.partition(TABLE_END)
    return f"{head}{TABLE_START}{findings_table()}{TABLE_END}{tail}"


def rules_page() -> str:
    """docs/rules.md: every recipe's rules in order, each with its codes and its examples
    as the diff the rewrite makes."""
    defaults = Options()
    lines = ["# Rules", "", f"Generated from the rule modules (`{COMMAND}`): "
             "each rule's codes and examples, which are also its tests "
             "(`tests/test_rule_examples.py`). Recipes run their rules in this order; see "
             "docs/architecture.md.", ""]
    for recipe in recipes():
        lines += [f"## Recipe `{recipe.name}`", ""]
        for rule in recipe.rules:
            module = rule.plan.__module__
            lines += [f"### `{rule.name}` ({module.replace('.', '/')}.py)", ""]
            lines += [f"- {code.id} ({code.severity.value}): {code.title}" for code in rule.codes]
            if rule.reports:
                shown = ", ".join(code.id for code in rule.reports)
                lines += [f"- also reports, as the rules that own them: {shown}"]
            lines.append("")
            if rule.projects:
                shown = ", ".join(f"`fixtures/projects/{name}/`" for name in rule.projects)
                lines += [f"It acts across the modules of a project; see {shown} (each an "
                          "`input/` tree and its `expected_O1/` rewrite).", ""]
            for example in rule.examples:
                shown = ", ".join(code.id for code in example.codes)
                flags = " ".join(f"{key}={value}" for key, value in vars(example.options).items()
                                 if getattr(defaults, key) != value)
                lines.append(f"Example ({shown}{'; ' + flags if flags else ''}):")
                lines.append("")
                if example.after is None:
                    lines += ["```python", example.before.rstrip("\n"), "```",
                              "", "is left as it is.", ""]
                    continue
                lines += ["```diff", *example_diff(example.before, example.after), "```", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def ops_page() -> str:
    """docs/ops.md: every row of the op table, the autocast spellings and the low dtypes."""
    lines = ["# Ops", "", f"Generated from `amprewrite/analysis/dtype/ops.py` (`{COMMAND}`): "
             "what torch does with each op the analysis asks about. Every precision question "
             "(escapes, the float16 constants, hazards, existing AMP, the lint) reads this "
             "table. The CPU columns are what torch does, checked on every row by "
             "`tests/runtime/test_op_table.py` in bfloat16 and float16; the CUDA column is "
             "the list the op is registered in, in torch's `ATen/autocast_mode.h` (checked "
             "against the installed headers, and run when a GPU is at hand).", "",
             "Autocast classes: **low** casts floating inputs to the autocast dtype, "
             "**float32** to float32, **promote** to the widest input, **none** leaves them "
             "(the result has the inputs' dtype), **raises** refuses the op. *One dtype*: its "
             "floating inputs (a module's: and its float32 weights) must share one dtype "
             "outside autocast; an in-place op's source (by position) must have its "
             "receiver's dtype, under autocast or not. *Saturates*: its result tends to ±1 "
             "and rounds to it in low precision, so `1 - tanh(z)` cancels to zero: its input "
             "is cast to float32 where such a difference is taken.", "",
             "| op | spellings | CPU autocast | CUDA autocast | CPU low kernels | one dtype "
             "| saturates | returns | example |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for op in ops.OPS:
        where = ", ".join(sorted(w.value for w in op.where))
        kernels = ", ".join(sorted(op.low_kernels)) or "none"
        same = f"source {op.source}" if op.source is not None else "yes" if op.same_dtype else ""
        via = f" (via `{op.aten}`)" if op.aten else ""
        lines.append(f"| `{op.name}` | {where} | {op.cpu.value} | {op.cuda.value}{via} | "
                     f"{kernels} | {same} | {'yes' if op.saturates else ''} | "
                     f"{op.returns.value} | `{op.example}` |")
    namespaces = ", ".join(f"`{n}`" for n in ops.FLOAT32_NAMESPACES)
    removed = ", ".join(f"`torch.{n}`" for n in sorted(ops.REMOVED_LINALG))
    lines += ["", f"Whole namespaces without low-precision kernels on the CPU: {namespaces}; "
              f"removed for their torch.linalg successors: {removed}.", "",
              "## Autocast spellings", "", "| spelling | device | amprewrite's runtime |",
              "| --- | --- | --- |"]
    lines += [f"| `{a.name}` | {a.device or 'any'} | {'yes' if a.runtime else ''} |"
              for a in ops.AUTOCAST_SPELLINGS]
    lines += ["", "## Low-precision dtypes", ""]
    lines += [f"- `{name}`: {dtype}" for name, dtype in
              {**ops.LOW_DTYPES, **ops.LOW_TENSOR_TYPES}.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    """Regenerate docs/findings.md's table, docs/rules.md and docs/ops.md (from the repository
    root)."""
    page = Path("docs/findings.md")
    page.write_text(with_table(page.read_text(encoding="utf-8")), encoding="utf-8")
    Path("docs/rules.md").write_text(rules_page(), encoding="utf-8")
    Path("docs/ops.md").write_text(ops_page(), encoding="utf-8")


if __name__ == "__main__":
    main()
