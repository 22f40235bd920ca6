"""The generated documentation: docs/findings.md's table of every code and docs/rules.md
(every recipe's rules with their codes and examples). `python -m amprewrite.generated_docs`
regenerates both, from the repository root."""

from __future__ import annotations

from pathlib import Path

from amprewrite.code_index import codes
from amprewrite.explain import example_diff
from amprewrite.options import Options
from amprewrite.recipes import recipes

COMMAND = "python -m amprewrite.generated_docs"


def findings_table() -> str:
    """The Markdown table of every code, as docs/findings.md shows it."""
    rows = ["| code | severity | what | why it fires | what to do |",
            "| --- | --- | --- | --- | --- |"]
    rows += [f"| {c.id} | {c.severity.value} | {c.title} | {c.why} | {c.advice} |"
             for c in codes().values()]
    return "\n".join(rows) + "\n"


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


def main() -> None:
    """Regenerate docs/findings.md's table and docs/rules.md (from the repository root)."""
    page = Path("docs/findings.md")
    page.write_text(with_table(page.read_text(encoding="utf-8")), encoding="utf-8")
    Path("docs/rules.md").write_text(rules_page(), encoding="utf-8")


if __name__ == "__main__":
    main()
