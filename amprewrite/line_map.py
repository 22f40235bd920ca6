"""Lines of a rewritten text traced back to the original's."""

from __future__ import annotations

from collections.abc import Callable


def line_map(new: bytes | str, old: bytes | str) -> Callable[[int], int]:
    """Map a 1-based line of `new` to the line of `old` it comes from (or sits at)."""
    import difflib  # imported here: only migrations and refused reverts need it

    matcher = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False)
    blocks = matcher.get_opcodes()

    def to_old(line: int) -> int:
        index = line - 1
        for tag, i1, _i2, j1, j2 in blocks:
            if j1 <= index < j2:
                return (i1 + index - j1 if tag == "equal" else i1) + 1
        return line

    return to_old
