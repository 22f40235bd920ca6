"""Where an added import goes: where isort (and ruff's `I` rules) would put it.

A training script's imports are grouped in sections (standard library, third party, first
party, local) separated by blank lines, each sorted. An added third-party import
(`from amprewrite_runtime import ...`, `from torch... import ...`) belongs to the section that
imports torch (else a training framework: transformers, Accelerate, ...), at its sorted place
there: straight imports before `from` imports (isort's and ruff's default), or one list by
module name (`force_sort_within_sections`), whichever the section already follows. A file
whose imports follow neither, or that imports neither, gets it after its last import.
"""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from amprewrite.analysis.facts import ModuleFacts
from amprewrite.analysis.names import dotted

SortKey = tuple[object, ...]
# The third-party section is the one importing torch, else a training framework (a Hugging
# Face or DeepSpeed script need not import torch itself).
_ANCHORS = (frozenset({"torch"}), frozenset({"transformers", "trl", "accelerate", "lightning",
                                             "pytorch_lightning", "deepspeed", "datasets"}))


def _by_type(module: str, is_from: bool) -> SortKey:
    return (is_from, module.lower())


def _by_module(module: str, is_from: bool) -> SortKey:
    return (module.lower(), is_from)


_ORDERS: tuple[Callable[[str, bool], SortKey], ...] = (_by_type, _by_module)


def import_index(facts: ModuleFacts, statement: cst.SimpleStatementLine) -> tuple[int, bool]:
    """The index of `facts.module.body` to insert `statement` (one import) before, and whether
    it opens its section there (and must take over the blank lines above the section)."""
    added = _imported(statement)
    sections = _sections(facts)
    section = next((s for anchors in _ANCHORS for s in sections if any(
        module.split(".")[0] in anchors for module, _ in map(_imported, s))), None)
    if added is None or section is None:
        return facts.header_imports_end, False
    first = _index(facts.module.body, section[0])
    for order in _ORDERS:
        keys = [order(*_imported(s)) for s in section]  # type: ignore[misc]
        if keys == sorted(keys):
            before = sum(key <= order(*added) for key in keys)
            return first + before, before == 0 and _blank_above(section[0])
    return facts.header_imports_end, False


def standard_library_index(
    facts: ModuleFacts, statement: cst.SimpleStatementLine
) -> tuple[int, bool, bool] | None:
    """Where isort puts an added import of the standard library (`import os`): the index of
    its sorted place in the module's standard-library section and whether it opens that
    section (as `import_index`), or a section of its own opened before the first import
    (the third value, True); None for any other import, or a module without imports."""
    import sys

    added = _imported(statement)
    if added is None or added[0].split(".")[0] not in sys.stdlib_module_names:
        return None
    sections = _sections(facts)
    if not sections:
        return None
    for section in sections:
        modules = [_imported(s) for s in section]
        if all(m is not None and m[0].split(".")[0] in sys.stdlib_module_names
               for m in modules):
            keys = [_by_type(*m) for m in modules if m is not None]
            before = sum(key <= _by_type(*added) for key in keys)
            first = _index(facts.module.body, section[0])
            return first + before, before == 0 and _blank_above(section[0]), False
    return _index(facts.module.body, sections[0][0]), False, True


def _sections(facts: ModuleFacts) -> list[list[cst.SimpleStatementLine]]:
    """The runs of plain import lines among the leading imports, split at blank lines."""
    sections: list[list[cst.SimpleStatementLine]] = []
    previous_was_import = False
    for statement in facts.module.body[:facts.header_imports_end]:
        if not isinstance(statement, cst.SimpleStatementLine) or _imported(statement) is None:
            previous_was_import = False
            continue
        if not previous_was_import or _blank_above(statement):
            sections.append([])
        sections[-1].append(statement)
        previous_was_import = True
    return sections


def _imported(statement: cst.BaseStatement) -> tuple[str, bool] | None:
    """(module, is a `from` import) of a line holding one import; None otherwise."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if isinstance(small, cst.Import):
        return dotted(small.names[0].name) or "", False
    if isinstance(small, cst.ImportFrom):
        module = dotted(small.module) if small.module is not None else ""
        return "." * len(small.relative) + (module or ""), True
    return None


def _blank_above(statement: cst.BaseStatement) -> bool:
    leading = getattr(statement, "leading_lines", ())
    return any(line.comment is None for line in leading)


def _index(body: tuple[cst.BaseStatement, ...] | list[cst.BaseStatement],
           statement: cst.BaseStatement) -> int:
    return next(i for i, s in enumerate(body) if s is statement)
