"""Codemod speed: end-to-end lines per second against libcst's bare parse rate on the same
files, measured in one run, and the wall time of a one-file `--check` against importing libcst.

    python benchmarks/codemod_speed.py [--files N] [--torch-files N] [--repeats N]
                                       [--torch-repeats N] [--runs N] [--tree DIR]...
                                       [--json OUT.json]

Trees: a generated corpus of training scripts (benchmarks/corpus.py; every file is rewritten)
and the installed torch package's own sources (most files mention torch, so they are parsed
and analysed; a few are rewritten). For each: libcst's `parse_module` over every file in this
process (reading excluded), then `amprewrite --check -q --jobs 1 TREE` and `--jobs 2` as the
user runs them (start-up, discovery, reading, reporting included). Target: one process reaches
at least half of the bare parse rate. `--tree DIR` measures a tree of your own as well (a corpus
of real training scripts). Each ratio is given in wall time and in CPU time (the parse's
`process_time`, the child's user + system time), which a loaded machine disturbs less.

One-file `--check`: `amprewrite --check train.py` (a fixture's training script, beside a
pyproject.toml with a [tool.amprewrite] table) against `python -c "import libcst"`, run in
turns, median wall time of each. Target: within 1.5x.

The package is byte-compiled first and the children run without PYTHONDONTWRITEBYTECODE, as
after `pip install`: compiling amprewrite's sources at every start would be measured otherwise.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _harness as h
import corpus
import libcst as cst

from amprewrite.discovery import discover

ROOT = Path(__file__).resolve().parents[1]
ONE_FILE = ROOT / "fixtures" / "mnist_functions" / "input.py"
THROUGHPUT_TARGET = 0.5
STARTUP_TARGET = 1.3  # issue 24: a one-file --check at most 1.3x `import libcst`


def environment() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def amprewrite_command() -> list[str]:
    """The `amprewrite` console script of this interpreter's environment."""
    script = shutil.which("amprewrite", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "amprewrite"]


def parse_seconds(sources: list[bytes], repeats: int) -> tuple[float, float]:
    """Median wall and CPU time for libcst to parse every source once (what it refuses
    counts too: amprewrite reports those files)."""
    wall, cpu = [], []
    for _ in range(repeats):
        started, started_cpu = time.perf_counter(), time.process_time()
        for source in sources:
            with contextlib.suppress(cst.ParserSyntaxError):
                cst.parse_module(source)
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return statistics.median(wall), statistics.median(cpu)


def check_seconds(tree: Path, jobs: int, repeats: int) -> tuple[float, float]:
    """Median wall and CPU time (the child's user + system) of `amprewrite --check -q
    --jobs N tree`."""
    wall, cpu = [], []
    for _ in range(repeats):
        started, before = time.perf_counter(), os.times()
        done = subprocess.run([*amprewrite_command(), "--check", "-q", "--jobs", str(jobs),
                               str(tree)], env=environment(), capture_output=True, check=False)
        after = os.times()
        wall.append(time.perf_counter() - started)
        cpu.append(after.children_user + after.children_system
                   - before.children_user - before.children_system)
        if done.returncode not in (0, 1):
            raise RuntimeError(f"amprewrite failed on {tree} (exit {done.returncode}):\n"
                               f"{done.stderr.decode(errors='replace')[-3000:]}")
    return statistics.median(wall), statistics.median(cpu)


def throughput(name: str, tree: Path, repeats: int) -> dict[str, object]:
    paths = [target.path for target in discover([tree], ()) if target.path.suffix == ".py"]
    sources = [path.read_bytes() for path in paths]
    lines = sum(source.count(b"\n") for source in sources)
    h.progress(f"{name}: {len(paths)} files, {lines} lines")
    parse, parse_cpu = parse_seconds(sources, repeats)
    (one, one_cpu), (two, _) = check_seconds(tree, 1, repeats), check_seconds(tree, 2, repeats)
    return {"tree": name, "files": len(paths), "lines": lines,
            "parse_lines_per_s": lines / parse, "check_jobs1_lines_per_s": lines / one,
            "check_jobs2_lines_per_s": lines / two, "jobs1_over_parse": parse / one,
            "jobs1_over_parse_cpu": parse_cpu / one_cpu,
            "target_met": parse / one >= THROUGHPUT_TARGET}


def sample_tree(source: Path, destination: Path, files: int) -> Path:
    """The first `files` files of `source`'s walk, copied with their relative paths."""
    for target in discover([source], ())[:files]:
        copy = destination / target.path.relative_to(source)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(target.path, copy)
    return destination


def one_file_check(directory: Path, runs: int) -> dict[str, object]:
    """Wall time of a one-file --check and of importing libcst, run in turns, in a directory
    of its own (beside the trees above, a sampled `torch/` package would be a project module
    its `import torch` reaches, as Python itself would import it from there)."""
    directory = directory / "one_file"
    directory.mkdir()
    script = directory / "train.py"
    shutil.copyfile(ONE_FILE, script)
    (directory / "pyproject.toml").write_text('[tool.amprewrite]\nopt-level = "O1"\n')
    commands = {"check": [*amprewrite_command(), "--check", str(script)],
                "import_libcst": [sys.executable, "-c", "import libcst"]}
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs + 2):  # the first two rounds warm the file cache, and are dropped
        for name, command in commands.items():
            started = time.perf_counter()
            subprocess.run(command, env=environment(), capture_output=True, check=False,
                           cwd=directory)
            times[name].append(time.perf_counter() - started)
    median = {name: statistics.median(values[2:]) for name, values in times.items()}
    ratio = median["check"] / median["import_libcst"]
    return {"file": ONE_FILE.relative_to(ROOT).as_posix(), "runs": runs,
            "check_ms": median["check"] * 1000, "import_libcst_ms": median["import_libcst"] * 1000,
            "ratio": ratio, "target_met": ratio <= STARTUP_TARGET}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=240, help="generated training scripts")
    parser.add_argument("--torch-files", type=int, default=None,
                        help="only the first N files of torch's sources (default: all)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each measurement on the generated corpus (median)")
    parser.add_argument("--torch-repeats", type=int, default=1,
                        help="runs of each measurement on torch's sources (default: 1)")
    parser.add_argument("--runs", type=int, default=20, help="one-file --check runs")
    parser.add_argument("--tree", type=Path, action="append", default=[],
                        help="a tree of your own to measure too (e.g. real training scripts)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()

    compileall.compile_dir(ROOT / "amprewrite", quiet=1)
    info = h.machine()
    print(h.describe(info))
    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.origin is not None
    torch_root = Path(spec.origin).parent
    with tempfile.TemporaryDirectory(prefix="amprewrite-speed-") as directory:
        temporary = Path(directory)
        generated = temporary / "corpus"
        corpus.generate(generated, args.files)
        torch_tree = torch_root if args.torch_files is None else sample_tree(
            torch_root, temporary / "torch", args.torch_files)
        results = [throughput("generated training scripts", generated, args.repeats),
                   throughput(f"torch {info['torch']} sources", torch_tree, args.torch_repeats),
                   *(throughput(str(tree), tree, args.repeats) for tree in args.tree)]
        startup = one_file_check(temporary, args.runs)

    h.print_table(
        ["tree", "files", "lines", "libcst parse lines/s", "--jobs 1 lines/s",
         "--jobs 2 lines/s", "jobs 1 / parse", "CPU: jobs 1 / parse", f">= {THROUGHPUT_TARGET}"],
        [[r["tree"], f"{r['files']:,}", f"{r['lines']:,}", f"{r['parse_lines_per_s']:,.0f}",
          f"{r['check_jobs1_lines_per_s']:,.0f}", f"{r['check_jobs2_lines_per_s']:,.0f}",
          f"{r['jobs1_over_parse']:.2f}", f"{r['jobs1_over_parse_cpu']:.2f}",
          "yes" if r["target_met"] else "NO"]
         for r in results],
        align="lrrrrrrrl")
    print()
    h.print_table(
        ["one-file --check", "ms", "import libcst ms", "ratio", f"<= {STARTUP_TARGET}"],
        [[startup["file"], f"{startup['check_ms']:.0f}", f"{startup['import_libcst_ms']:.0f}",
          f"{startup['ratio']:.2f}", "yes" if startup["target_met"] else "NO"]],
        align="lrrrl")
    h.write_json(args.json, {"benchmark": "codemod_speed", "machine": info,
                             "throughput": results, "one_file_check": startup})


if __name__ == "__main__":
    main()
