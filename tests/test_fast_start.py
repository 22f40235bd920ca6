"""A fast start: `amprewrite --version` loads neither libcst nor the engine's modules."""

from __future__ import annotations

import subprocess
import sys

from amprewrite import __version__

# What the command line must not load before it knows there is a file to rewrite.
_ENGINE = ("libcst", "amprewrite.engine", "amprewrite.analysis", "amprewrite.rules",
           "amprewrite.recipes", "amprewrite.project", "amprewrite.transform")

_VERSION_RUN = f"""
import sys
sys.argv = ["amprewrite", "--version"]
from amprewrite.cli import entry_point
try:
    entry_point()
except SystemExit:
    pass
print(sorted(m for m in sys.modules if m.startswith({_ENGINE!r})))
"""


def test_version_loads_no_engine_module() -> None:
    done = subprocess.run([sys.executable, "-c", _VERSION_RUN], capture_output=True, text=True,
                          check=True)
    assert done.stdout.splitlines() == [f"amprewrite {__version__}", "[]"], done.stderr
