"""The command line's start-up cache (`amprewrite/startup_cache.py`): the code `@dataclass`
compiles at import is read back from the user's cache on the next start, the classes made
from it behave the same, and nothing breaks without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Installs the cache, imports what a rewrite imports and makes a dataclass of every kind the
# generated code covers; prints what was compiled, what was served, and the classes' behaviour.
PROBE = """
import dataclasses, json, sys
from amprewrite import startup_cache
startup_cache.install()
import libcst, amprewrite.engine

@dataclasses.dataclass(frozen=True, order=True)
class Point:
    x: int
    y: int = 2
    tags: tuple = dataclasses.field(default_factory=tuple)

@dataclasses.dataclass(slots=True, kw_only=True)
class Settings:
    name: str
    values: list = dataclasses.field(default_factory=list)

point = Point(1)
try:
    point.x = 3
    frozen = False
except dataclasses.FrozenInstanceError:
    frozen = True
behaviour = [repr(point), point == Point(1, 2), Point(0) < point, hash(point) == hash(Point(1)),
             frozen, repr(Settings(name="a")), libcst.parse_module("x = 1").code]
print(json.dumps({"compiled": startup_cache._compiled, "served": len(startup_cache._used),
                  "installed": "exec" in vars(dataclasses), "behaviour": behaviour}))
"""


def _probe(cache_home: Path, **env: str) -> dict:
    import json

    environment = {key: value for key, value in os.environ.items()
                   if key != "AMPREWRITE_NO_CACHE"}
    environment.update(XDG_CACHE_HOME=str(cache_home), **env)
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=environment,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_a_second_start_compiles_nothing_and_behaves_the_same(tmp_path: Path) -> None:
    first = _probe(tmp_path)
    assert first["installed"] and first["compiled"] > 500  # libcst's nodes, our facts
    assert len(list((tmp_path / "amprewrite").glob("dataclass-code-*.marshal"))) == 1
    second = _probe(tmp_path)
    assert second["compiled"] == 0 and second["served"] == first["served"]
    without = _probe(tmp_path / "elsewhere", AMPREWRITE_NO_CACHE="1")
    assert not without["installed"] and not (tmp_path / "elsewhere").exists()
    assert first["behaviour"] == second["behaviour"] == without["behaviour"]
    assert second["behaviour"][:6] == ["Point(x=1, y=2, tags=())", True, True, True, True,
                                       "Settings(name='a', values=[])"]


@pytest.mark.parametrize("content", [b"", b"not marshal", b"\xe9\x00\x00"])
def test_an_unreadable_cache_is_compiled_again_and_replaced(
    tmp_path: Path, content: bytes
) -> None:
    _probe(tmp_path)
    (cache,) = (tmp_path / "amprewrite").glob("*.marshal")
    cache.write_bytes(content)
    again = _probe(tmp_path)
    assert again["compiled"] > 500
    assert _probe(tmp_path)["compiled"] == 0


def test_no_cache_directory_means_no_cache(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache directory would go")
    assert _probe(blocked)["compiled"] > 500  # cannot write: compiles every time, no error
    assert _probe(blocked)["compiled"] > 500


def test_importing_amprewrite_as_a_library_installs_nothing() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import dataclasses, amprewrite.engine, amprewrite.cli; "
         "print('exec' in vars(dataclasses))"],
        cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_the_command_line_starts_through_the_cache(tmp_path: Path) -> None:
    """`python -m amprewrite` (and the `amprewrite` script, amprewrite.launch) install it."""
    script = tmp_path / "train.py"
    script.write_text("x = 1\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("AMPREWRITE_NO_CACHE", None)
    subprocess.run([sys.executable, "-m", "amprewrite", "--check", "-q", str(script)],
                   cwd=REPO, env=env, capture_output=True, check=False)
    assert list((tmp_path / "cache" / "amprewrite").glob("dataclass-code-*.marshal"))
