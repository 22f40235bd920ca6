"""A cache of the code `@dataclass` generates, for a fast start of the command line.

`@dataclass` writes each class's `__init__`, `__repr__`, `__eq__`... as source text and
compiles it when the class is created: about 1,400 compilations for libcst's nodes and
amprewrite's facts, half of a one-file run's start-up. The text is the same from one run to
the next, so its compiled code is kept (marshal, one file per Python build) in the user's
cache directory and read back at the next start; a text not seen before is compiled as
`dataclasses` would. Only the command line installs it (`install()`, before it imports
libcst): importing amprewrite as a library changes nothing. Anything that goes wrong with the
file (no cache directory, unreadable, stale) falls back to compiling; `AMPREWRITE_NO_CACHE=1`
turns it off.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import dataclasses
import marshal
import os
import sys
from types import CodeType
from typing import Any

_ENTRIES_KEPT_PER_USED = 4  # a file this much larger than one run needs is rewritten smaller

_codes: dict[str, CodeType] = {}
_used: set[str] = set()
_compiled = 0  # texts compiled in this run (not found in the file)


def cache_file() -> str | None:
    """The cache's path for this Python build, or None when there is no cache directory."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if not os.path.isabs(root):
        return None
    build = (f"{sys.implementation.cache_tag}-{sys.hexversion:x}-{marshal.version}"
             f"-O{sys.flags.optimize}")  # what `compile` depends on besides the text
    name = f"dataclass-code-{build}.marshal"
    return os.path.join(root, "amprewrite", name)


def install() -> None:
    """Serve the compilations `dataclasses` asks for from the cache, from now on."""
    if os.environ.get("AMPREWRITE_NO_CACHE") or "exec" in vars(dataclasses):
        return  # turned off, or already installed (by us or by someone else)
    path = cache_file()
    if path is None:
        return
    _codes.update(_read(path))
    dataclasses.exec = _cached_exec  # type: ignore[attr-defined]  # its module-level lookup
    atexit.register(_write, path)


def _cached_exec(source: Any, namespace: Any = None, local: Any = None, /) -> None:
    """`exec` as `dataclasses` calls it, with the compiled text taken from the cache."""
    global _compiled
    if type(source) is str:
        code = _codes.get(source)
        if code is None:  # compiled as exec(str) would: no __future__ flags of ours
            code = _codes[source] = compile(source, "<string>", "exec", dont_inherit=True)
            _compiled += 1
        _used.add(source)
        source = code
    builtins.exec(source, namespace, local)


def _read(path: str) -> dict[str, CodeType]:
    try:
        with open(path, "rb") as file:
            codes = marshal.loads(file.read())  # `marshal.load(file)` reads piece by piece
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if not isinstance(codes, dict):
        return {}
    return {text: code for text, code in codes.items()
            if isinstance(text, str) and isinstance(code, CodeType)}


def _write(path: str) -> None:
    """Keep what this run compiled (atomically; a failure only costs the next start)."""
    if not _compiled:
        return
    kept = _codes
    if len(kept) > _ENTRIES_KEPT_PER_USED * max(len(_used), 1):
        kept = {text: _codes[text] for text in _used}  # texts of older versions, dropped
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(temporary, "wb") as file:
            marshal.dump(kept, file)
        os.replace(temporary, path)
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            os.unlink(temporary)
