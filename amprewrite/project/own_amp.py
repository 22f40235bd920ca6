"""A project whose training already runs the author's mixed precision: its other modules (an
evaluation or prediction script) get no autocast of amprewrite's, which would run them in a
precision the author chose against; their evaluation code is left as written, with a finding.

Among the files of one run, those that may train with AMP (a cheap text search, then the
analysis the rewrite itself makes) mark their project (the root `layout.project_root`
finds): every other named file of that project is rewritten with `Options.project_amp`
naming the first of them. A run naming one file of a project has nothing to keep, and
parses nothing more.
"""

from __future__ import annotations

import re
from pathlib import Path

from amprewrite.fileio import read_source
from amprewrite.options import Options
from amprewrite.project.layout import project_root

# A module that may train under its own AMP names an AMP API and a backward or a step.
_AMP = re.compile(rb"autocast|GradScaler|torch\.cuda\.amp|torch\.cpu\.amp")
_TRAINS = re.compile(rb"backward|\.step\(")
_OWN_AMP_RECIPES = frozenset({"lint", "migrate-torch-cuda-amp"})  # the author's, kept


def own_amp_owners(paths: dict[Path, str], options: Options) -> dict[Path, str]:
    """Each named file (resolved path -> as shown) of a project with another named file
    whose training step runs the author's own mixed precision -> that file, as shown."""
    roots: dict[Path, Path] = {}  # a directory's project root, found once
    projects: dict[Path, list[Path]] = {}
    for path in paths:
        if path.parent not in roots:
            roots[path.parent] = project_root([path])
        projects.setdefault(roots[path.parent], []).append(path)
    owners: dict[Path, str] = {}
    for members in projects.values():
        if len(members) < 2:  # nothing else to keep from autocasts
            continue
        owner = next((paths[m] for m in sorted(members, key=paths.__getitem__)
                      if _trains_with_own_amp(m, options)), None)
        if owner is not None:
            owners.update({m: owner for m in members if paths[m] != owner})
    return owners


def _trains_with_own_amp(path: Path, options: Options) -> bool:
    from amprewrite import engine  # loads libcst: only for a file that may train with AMP
    from amprewrite.analysis import ModuleAnalysis
    from amprewrite.analysis.statements import is_backward_call
    from amprewrite.recipes import choose

    try:
        source = read_source(path, engine.MAX_SOURCE_BYTES)
    except OSError:
        return False
    if not (_AMP.search(source) and _TRAINS.search(source)):
        return False
    try:
        analysis = ModuleAnalysis(engine.parse(source), source=source)
        return choose(analysis, options).name in _OWN_AMP_RECIPES and any(
            is_backward_call(site.call) for site in analysis.facts.calls)
    except Exception:  # its own run reports why it cannot be read or analysed
        return False
