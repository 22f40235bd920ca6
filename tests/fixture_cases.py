"""The before/after fixture pairs under fixtures/, and how each is rewritten."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from amprewrite.options import Options

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

# Output styles: expected file suffix -> options.
STYLES: dict[str, Options] = {
    "O1": Options(opt_level="O1"),
    "O1_plain": Options(opt_level="O1", plain=True),
    "O2": Options(opt_level="O2"),
    "O3": Options(opt_level="O3", keep_batchnorm_fp32=True),
    "O0": Options(opt_level="O0"),
    "O1_reproducible": Options(opt_level="O1", reproducible=True, seed=1234),
    "O1_float16": Options(opt_level="O1", dtype="float16"),  # --dtype given: no run-time choice
    "O1_float8": Options(opt_level="O1", dtype="float8"),  # float8 linear layers over bfloat16
}


@dataclass(frozen=True)
class Case:
    name: str
    style: str

    @property
    def directory(self) -> Path:
        return FIXTURES / self.name

    @property
    def input(self) -> Path:
        return self.directory / "input.py"

    @property
    def expected(self) -> Path:
        """The expected output; a case without one must come back unchanged."""
        return self.directory / f"expected_{self.style}.py"

    @property
    def findings(self) -> Path:
        return self.directory / f"findings_{self.style}.txt"

    @property
    def options(self) -> Options:
        return STYLES[self.style]

    def __str__(self) -> str:
        return f"{self.name}-{self.style}"


def cases() -> list[Case]:
    found = []
    for directory in sorted(p for p in FIXTURES.iterdir() if (p / "input.py").exists()):
        found.append(Case(directory.name, "O1"))
        found.extend(Case(directory.name, style) for style in STYLES
                     if style != "O1" and (directory / f"findings_{style}.txt").exists())
    return found
