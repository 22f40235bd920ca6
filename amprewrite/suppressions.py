"""What the user asked not to see or change: `--select`/`--ignore` code prefixes and the
per-line comments, `# amprewrite: ignore[AMP110]` (every code without brackets) and
`# noqa: AMP110` (its AMP codes only: a bare `# noqa` is the linters')."""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from pathlib import Path

from amprewrite.fileio import resolved
from amprewrite.options import Options

LineCodes = dict[int, "set[str] | None"]  # line -> the codes its comment names (None: all)

_OWN = re.compile(rb"#\s*amprewrite:\s*ignore(?:\[([A-Z0-9,\s]+)\])?")
_NOQA = re.compile(rb"#\s*noqa:\s*([A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*)", re.IGNORECASE)
_AMP_CODE = re.compile(r"AMP[0-9]+")
_ANY = re.compile(rb"amprewrite:|noqa", re.IGNORECASE)


def wanted(code: str, select: tuple[str, ...], ignore: tuple[str, ...]) -> bool:
    """Whether `code` is selected and not ignored (each a tuple of code prefixes)."""
    if select and not code.startswith(select):
        return False
    return not (ignore and code.startswith(ignore))


def suppressed(codes: LineCodes, line: int, code: str) -> bool:
    """Whether the comment on `line` covers `code`."""
    if line not in codes:
        return False
    named = codes[line]
    return named is None or code in named


def line_codes(source: bytes) -> LineCodes:
    """Each line's suppression comment: the codes it names (None: every code)."""
    found: LineCodes = {}
    if _ANY.search(source) is None:
        return found
    for number, line in enumerate(source.splitlines(), start=1):
        if b"#" not in line:
            continue
        own = _OWN.search(line)
        if own is not None:
            named = own.group(1)
            found[number] = None if named is None else {
                c.strip() for c in named.decode().split(",") if c.strip()}
            continue
        noqa = _NOQA.search(line)
        if noqa is not None:
            amp = set(_AMP_CODE.findall(noqa.group(1).decode().upper()))
            if amp:
                found[number] = amp
    return found


# `per-file-ignores`: (the pattern made absolute, or the bare pattern where it names no
# directory and so matches a file's name anywhere, as ruff's do), and the codes it ignores
PerFileIgnores = tuple[tuple[str, tuple[str, ...]], ...]


def per_file_ignores(table: dict[str, list[str]], root: Path) -> PerFileIgnores:
    """The configuration's `per-file-ignores` table, its patterns relative to `root`."""
    return tuple((pattern if "/" not in pattern else (root / pattern).as_posix(),
                  tuple(codes)) for pattern, codes in table.items())


def ignored_in(table: PerFileIgnores, path: str) -> tuple[str, ...]:
    """The code prefixes `table` ignores in the file at `path`."""
    if not table:
        return ()
    where = resolved(Path(path)).as_posix()
    name = where.rsplit("/", 1)[-1]
    codes: list[str] = []
    for pattern, ignored in table:
        if fnmatch.fnmatchcase(name if "/" not in pattern else where, pattern):
            codes.extend(ignored)
    return tuple(codes)


def options_for(options: Options, path: str) -> Options:
    """`options` for the file at `path`: `per-file-ignores` added to its ignored codes."""
    if not options.per_file_ignores:
        return options
    extra = ignored_in(options.per_file_ignores, path)
    return dataclasses.replace(options, ignore=(*options.ignore, *extra), per_file_ignores=())
