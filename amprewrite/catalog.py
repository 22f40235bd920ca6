"""The catalog of finding codes: a leaf module, which every module that emits a code imports.

Each code is declared once, by `declare`, in the module that emits it (a rule, an analysis
that reports sites it leaves alone, or `findings` for the file-level outcomes); importing that
module registers it. `code_index.codes()` imports every such module and returns the whole
catalog; `generated_docs` renders docs/findings.md and docs/rules.md from it.
"""

from __future__ import annotations

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
    title: str  # type: ignore[assignment]  # shadows str.title: the text the docs show
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


def declared() -> dict[str, Code]:
    """The codes declared so far by id (those of the modules imported until now)."""
    return dict(_DECLARED)


def declared_code(code_id: str) -> Code | None:
    """The code with this id if a module imported until now declared it."""
    return _DECLARED.get(code_id)


# Each code's documentation: docs/findings.md has an anchor per code (`<a id="AMP212"></a>`,
# written by `generated_docs`), and `docs-url` in [tool.amprewrite] replaces the template.
# REPOSITORY is the project's repository, as [project.urls] of pyproject.toml names it
# (tests/test_docs_url.py keeps the two the same): None while it names none, and then no
# finding has a docs URL unless the configuration gives a template.
REPOSITORY: str | None = None
FINDINGS_PAGE = "docs/findings.md"
CODE_FIELD = "{code}"  # where a docs URL template puts the code's id


def default_docs_url() -> str | None:
    """The docs URL template without `docs-url`: the code's row of docs/findings.md on the
    project's repository (main branch), or None where the project names no repository."""
    if REPOSITORY is None:
        return None
    return f"{REPOSITORY.rstrip('/')}/blob/main/{FINDINGS_PAGE}#{CODE_FIELD}"


def docs_url(code_id: str, template: str | None) -> str | None:
    """The URL of a code's documentation from a template (`...#{code}`); None without one. The
    template's other braces are kept as they are (it is no format string)."""
    return None if template is None else template.replace(CODE_FIELD, code_id)
