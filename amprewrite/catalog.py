"""The catalog of finding codes.

Each code is declared once, by `declare`, in the module that emits it (a rule, an analysis
that reports sites it leaves alone, or `findings` for the file-level outcomes); importing that
module registers it. `codes()` imports every such module and returns the whole catalog, from
which `docs/findings.md` is generated (`python -m amprewrite.catalog`).
"""

from __future__ import annotations

import importlib
import pkgutil
from enum import Enum


class Severity(str, Enum):
    CHANGE = "change"  # the rewrite changed something here
    SKIP = "skip"  # a site the rewrite saw and deliberately left alone
    NOTE = "note"  # information about the whole file
    LINT = "lint"  # an AMP mistake in code that already uses AMP: fails --check
    ERROR = "error"  # the file could not be processed


CHANGE, SKIP, NOTE, LINT, ERROR = Severity


class Code(str):
    """A finding code: its id (the string itself, `AMP102`), severity, title, what the user
    should do (`advice`), why it fires, and an example (None: its rule's examples show it)."""

    severity: Severity
    title: str
    advice: str
    why: str
    example: str | None

    def __new__(
        cls, id: str, severity: Severity, title: str, advice: str, why: str,
        example: str | None = None,
    ) -> Code:
        code = super().__new__(cls, id)
        code.severity, code.title, code.advice = severity, title, advice
        code.why, code.example = why, example
        return code

    @property
    def id(self) -> str:
        return str(self)

    def __reduce__(self) -> tuple[type[Code], tuple[str, Severity, str, str, str, str | None]]:
        return Code, (str(self), self.severity, self.title, self.advice, self.why,
                      self.example)  # across processes


_DECLARED: dict[str, Code] = {}


def declare(
    id: str, severity: Severity, title: str, advice: str, *, why: str,
    example: str | None = None,
) -> Code:
    """Register a code; a second declaration of the same id is a programming error. `example`
    is left out where the examples of the rule emitting the code show it."""
    if id in _DECLARED:
        raise ValueError(f"finding code {id} declared twice")
    code = Code(id, severity, title, advice, why, example)
    _DECLARED[id] = code
    return code


_PACKAGES = ("amprewrite.analysis", "amprewrite.rules", "amprewrite.recipes", "amprewrite.project")


_loaded = False


def codes() -> dict[str, Code]:
    """Every declared code by id, in id order (imports, the first time, every module that may
    declare one)."""
    global _loaded
    if not _loaded:
        importlib.import_module("amprewrite.findings")
        for package_name in _PACKAGES:
            package = importlib.import_module(package_name)
            for module in pkgutil.iter_modules(package.__path__):
                importlib.import_module(f"{package_name}.{module.name}")
        _loaded = True
    return dict(sorted(_DECLARED.items()))


def lookup(code_id: str) -> Code | None:
    """The declared code with this id; None for an unregistered one (a plugin's, a test's)."""
    if code_id not in _DECLARED and not _loaded:
        codes()  # a module that declares it may not be imported yet
    return _DECLARED.get(code_id)


def severity_of(code_id: str) -> Severity:
    """A code's severity; an unregistered code counts as a change (it is shown)."""
    code = lookup(code_id)
    return code.severity if code is not None else Severity.CHANGE


def findings_table() -> str:
    """The Markdown table of every code, as docs/findings.md shows it."""
    rows = ["| code | severity | what | why it fires | what to do |",
            "| --- | --- | --- | --- | --- |"]
    rows += [f"| {c.id} | {c.severity.value} | {c.title} | {c.why} | {c.advice} |"
             for c in codes().values()]
    return "\n".join(rows) + "\n"


TABLE_START = "<!-- generated from amprewrite.catalog: python -m amprewrite.catalog -->\n"
TABLE_END = "<!-- end of generated table -->\n"


def with_table(page: str) -> str:
    """`page` with the text between the generated-table markers replaced by the table."""
    head, _, rest = page.partition(TABLE_START)
    _, _, tail = rest.partition(TABLE_END)
    return f"{head}{TABLE_START}{findings_table()}{TABLE_END}{tail}"


def rules_page() -> str:
    """docs/rules.md: every recipe's rules in order, each with its codes and its examples
    as the diff the rewrite makes."""
    from amprewrite.options import Options
    from amprewrite.recipes import recipes

    defaults = Options()
    lines = ["# Rules", "", "Generated from the rule modules (`python -m amprewrite.catalog`): "
             "each rule's codes and examples, which are also its tests "
             "(`tests/test_rule_examples.py`). Recipes run their rules in this order; see "
             "docs/architecture.md.", ""]
    for recipe in recipes():
        lines += [f"## Recipe `{recipe.name}`", ""]
        for rule in recipe.rules:
            module = rule.plan.__module__
            lines += [f"### `{rule.name}` ({module.replace('.', '/')}.py)", ""]
            lines += [f"- {code.id} ({code.severity.value}): {code.title}" for code in rule.codes]
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


def example_diff(before: str, after: str) -> list[str]:
    """A rule example's rewrite as the lines of a unified diff, without its header."""
    import difflib

    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=2)
    return list(diff)[2:]


def main() -> None:
    """Regenerate docs/findings.md's table and docs/rules.md (from the repository root)."""
    from pathlib import Path

    page = Path("docs/findings.md")
    page.write_text(with_table(page.read_text(encoding="utf-8")), encoding="utf-8")
    Path("docs/rules.md").write_text(rules_page(), encoding="utf-8")


if __name__ == "__main__":
    import amprewrite.catalog  # the module every declaration registers in, not __main__

    amprewrite.catalog.main()
