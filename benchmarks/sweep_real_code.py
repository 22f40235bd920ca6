"""Never crash on real code: run the codemod over every `.py` file of the installed torch
package and of the standard library, and count what happens.

    python benchmarks/sweep_real_code.py [--json OUT.json]

A crash is an exception other than the engine's RewriteError (AMP003/AMP004 findings); a
rewritten file must compile; an unchanged file must come back byte-identical.
"""

from __future__ import annotations

import argparse
import json
import sysconfig
import time
import traceback
from collections import Counter
from pathlib import Path

import torch

from amprewrite.engine import RewriteError, rewrite_source
from amprewrite.options import Options


def sweep(root: Path) -> dict[str, object]:
    counts: Counter[str] = Counter()
    crashes: list[str] = []
    lines = 0
    started = time.perf_counter()
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.relative_to(root).parts:
            continue  # the standard library only, not what is installed beside it
        source = path.read_bytes()
        lines += source.count(b"\n")
        try:
            result = rewrite_source(source, Options())
        except RewriteError as exc:
            counts[f"reported {exc.finding.code}"] += 1
            continue
        except Exception:
            counts["crashed"] += 1
            crashes.append(f"{path}: {traceback.format_exc(limit=2)}")
            continue
        if result.changed:
            try:
                compile(result.source, str(path), "exec")
                counts["rewritten, compiles"] += 1
            except SyntaxError:
                counts["rewritten, DOES NOT COMPILE"] += 1
                crashes.append(f"{path}: output does not compile")
        elif result.source == source:
            counts["unchanged, byte-identical"] += 1
        else:
            counts["unchanged but DIFFERENT BYTES"] += 1
    return {"root": str(root), "files": sum(counts.values()), "lines": lines,
            "seconds": round(time.perf_counter() - started, 1), "counts": dict(counts),
            "problems": crashes[:20]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    results = [sweep(Path(torch.__file__).parent), sweep(Path(sysconfig.get_paths()["stdlib"]))]
    for result in results:
        print(f"{result['root']}: {result['files']} files, {result['lines']} lines, "
              f"{result['seconds']} s")
        for outcome, count in sorted(result["counts"].items()):  # type: ignore[union-attr]
            print(f"  {count:6d}  {outcome}")
        for problem in result["problems"]:  # type: ignore[union-attr]
            print("  !", problem)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
