"""Project mode's speed: `amprewrite --check` on a generated 500-file repository, on one
training script named with the modules it imports, and on one single-file script.

    python benchmarks/project_speed.py [--runs N] [--markdown] [--json OUT.json]
                                       [--keep DIR]

The repository (generated, seeded, into a temporary directory) has a `pyproject.toml` at its
root and 500 Python files: 440 with no torch at all (utility packages, 50-200 lines a module,
importing each other, and the packages' `__init__.py`), 50 torch modules that are not
training code (nn.Module classes, datasets, transforms, loaders) and 10 training modules in
the shapes of real projects, each step spread over modules:

- `main.py`, `engine.py`, `utils.py`, `models.py` at the root (DETR: `main()` builds the
  model and optimizer and calls `engine.train_one_epoch(model, criterion, loader, optimizer,
  device, epoch, max_norm)`, checkpoints through `utils.save_on_master(*args, **kwargs)`),
  imported as a script imports its neighbours;
- `detection/` (DETR again, relative imports: `from .engine import train_one_epoch`);
- `contrastive/` (SupContrast: `util.save_model(model, optimizer, opt, epoch, path)` builds
  the checkpoint dict; absolute imports);
- `trainers/` (a `Trainer` receiving its optimizer in `__init__` from the script).

Measured as the user runs them, each a fresh `amprewrite` process, in turns, one warm-up
round dropped, best of `--runs` (wall time, and CPU time of the process and its workers):
`--check -q --jobs 1 REPO` and `--check -q REPO` (all cores), `--check -q main.py` in the
repository (the pre-commit case: one file named, the project modules it imports read),
`--check -q engine.py` (a callee named alone: the project is searched for its importers),
`--check -q train.py` on a single-file training script alone (the fixture `toplevel_loop`,
beside the same `pyproject.toml`), and `python -c "import libcst"`. How many files project
mode reads, outlines (Python's `ast`: those that mention torch or an optimizer) and links
(libcst) is counted in this process with `load_program`, the function the CLI calls; its
project phase (`rewrite_project`: `load_program`, then the linked groups parsed, analysed
and rewritten), which runs in the parent before the files left to the single-file path are
spread over `--jobs`, is timed in this process too, best of `--runs`.

The package is byte-compiled first and the children run without PYTHONDONTWRITEBYTECODE, as
after `pip install` (as in codemod_speed.py).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from unittest import mock

import _harness as h
from codemod_speed import amprewrite_command, environment

from amprewrite.engine import MAY_TRAIN
from amprewrite.fileio import read_source
from amprewrite.options import Options
from amprewrite.project import program
from amprewrite.project.outline import outline
from amprewrite.project.rewrite import rewrite_project

ROOT = Path(__file__).resolve().parents[1]
SINGLE_FILE = ROOT / "fixtures" / "toplevel_loop" / "input.py"
SEED = 0
PYPROJECT = ('[project]\nname = "vision-lab"\nversion = "0.3.0"\n'
             'requires-python = ">=3.10"\n\n[tool.amprewrite]\nopt-level = "O1"\n')
PLAIN_MODULES = 440  # `__init__.py` files included
TORCH_MODULES = 50  # the templates' two `models.py` included

# ---------------------------------------------------------------------------------------
# Plain utility code: packages of modules that never mention torch.

PLAIN_PACKAGES = ("common", "common/text", "configs", "storage", "storage/backends",
                  "reporting", "scheduling", "geometry", "validation", "caching", "cli",
                  "registry")
TOPICS = ("record", "batch", "token", "path", "entry", "metric", "report", "label", "span",
          "shard", "field", "queue", "job", "column", "event", "window", "bucket", "chunk",
          "option", "rule", "task", "node", "edge", "frame", "sample", "header", "cursor",
          "region", "slot", "ticket")
SUFFIXES = ("utils", "helpers", "tools", "ops", "core", "common", "checks", "format",
            "parsing", "support")


@dataclass(frozen=True)
class Section:
    """One function or class of a plain module: the imports it needs, its code, and how a
    module importing it calls it (`$f` the function as the importer names it)."""

    imports: tuple[str, ...]
    code: Template
    exported: str | None = None  # the function others may import
    call: str | None = None


PLAIN_SECTIONS = {
    "config": Section(
        ("from dataclasses import dataclass, field, fields", "from typing import Any"),
        Template('''

@dataclass
class ${Topic}Config:
    """Settings of the $topic step, read from a mapping with defaults."""

    name: str = "$topic"
    limit: int = $n1
    ratio: float = $f1
    tags: list[str] = field(default_factory=list)
    enabled: bool = True

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ${Topic}Config:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown $topic settings: {', '.join(unknown)}")
        return cls(**values)

    def validate(self) -> list[str]:
        problems = []
        if self.limit <= 0:
            problems.append("limit must be positive")
        if not 0.0 <= self.ratio <= 1.0:
            problems.append("ratio must be between 0 and 1")
        if len(set(self.tags)) != len(self.tags):
            problems.append("tags must be unique")
        return problems
''')),
    "normalize": Section(
        (), Template('''

def normalize_$topic(text: str, lower: bool = True, keep: str = "$keep") -> str:
    """Collapse whitespace and drop characters outside letters, digits and `keep`."""
    out = []
    previous_space = False
    for char in text:
        if char.isalnum() or char in keep:
            out.append(char.lower() if lower else char)
            previous_space = False
        elif char.isspace() and not previous_space:
            out.append(" ")
            previous_space = True
    return "".join(out).strip()
'''), "normalize_$topic", "[$f(str(item)) for item in items]"),
    "records": Section(
        ("import json", "from pathlib import Path", "from typing import Any"), Template('''

def load_${topic}_records(path: str | Path,
                         required: tuple[str, ...] = ("$key",)) -> list[dict[str, Any]]:
    """Records of a JSON-lines file; lines missing a required key are skipped and counted."""
    records: list[dict[str, Any]] = []
    skipped = 0
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: {exc.msg}") from exc
            if all(key in record for key in required):
                records.append(record)
            else:
                skipped += 1
    logger.debug("loaded %d records from %s (%d skipped)", len(records), path, skipped)
    return records
''')),
    "retry": Section(
        ("import functools", "import time", "from collections.abc import Callable",
         "from typing import Any"), Template('''

def retry_$topic(attempts: int = $n2, delay: float = $f1) -> Callable[[Callable], Callable]:
    """Call the decorated function again after `delay` seconds while it raises OSError."""

    def decorate(function: Callable) -> Callable:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for attempt in range(1, attempts + 1):
                try:
                    return function(*args, **kwargs)
                except OSError as exc:
                    if attempt == attempts:
                        raise
                    logger.warning("%s failed (%s), retry %d of %d", function.__name__, exc,
                                   attempt, attempts)
                    time.sleep(delay * attempt)
            return None

        return wrapper

    return decorate
''')),
    "cache": Section(
        ("from collections import OrderedDict", "from typing import Any"), Template('''

class ${Topic}Cache:
    """A bounded mapping that forgets the least recently used $topic first."""

    def __init__(self, capacity: int = $n3) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, Any] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: str, default: Any = None) -> Any:
        if key in self._items:
            self._items.move_to_end(key)
            self.hits += 1
            return self._items[key]
        self.misses += 1
        return default

    def put(self, key: str, value: Any) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)

    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0
''')),
    "merge": Section(
        ("from typing import Any",), Template('''

def merge_${topic}_settings(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """`override` merged into a copy of `base`, nested mappings merged key by key."""
    merged = dict(base)
    for key, value in override.items():
        current = merged.get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            merged[key] = merge_${topic}_settings(current, value)
        elif value is None and key in merged:
            del merged[key]
        else:
            merged[key] = value
    return merged
'''), "merge_${topic}_settings", '$f(options, {"count": len(items)})'),
    "summary": Section(
        ("import math", "from collections.abc import Iterable"), Template('''

def summarize_${topic}_values(values: Iterable[float]) -> dict[str, float]:
    """Count, mean, standard deviation and the ${q}th percentile of `values`."""
    data = sorted(values)
    if not data:
        return {"count": 0.0, "mean": 0.0, "std": 0.0, "p$q": 0.0}
    mean = sum(data) / len(data)
    variance = sum((x - mean) ** 2 for x in data) / max(len(data) - 1, 1)
    rank = ($q / 100) * (len(data) - 1)
    low, high = math.floor(rank), math.ceil(rank)
    percentile = data[low] + (data[high] - data[low]) * (rank - low)
    return {"count": float(len(data)), "mean": mean, "std": math.sqrt(variance),
            "p$q": percentile}
'''), "summarize_${topic}_values", "$f([float(len(str(item))) for item in items])"),
    "walk": Section(
        ("import os", "from pathlib import Path"), Template('''

def find_${topic}_files(root: str | Path, suffixes: tuple[str, ...] = ($suffixes)) -> list[Path]:
    """Files under `root` with one of `suffixes`, hidden and cache directories skipped."""
    found = []
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(d for d in subdirectories
                                   if d != "__pycache__" and not d.startswith("."))
        for name in sorted(files):
            if name.endswith(suffixes):
                found.append(Path(directory) / name)
    logger.debug("%d $topic files under %s", len(found), root)
    return found
''')),
    "timer": Section(
        ("import contextlib", "import time", "from collections.abc import Iterator"),
        Template('''

@contextlib.contextmanager
def timed_$topic(label: str, sink: list[tuple[str, float]] | None = None) -> Iterator[None]:
    """Log how long the block took, and append it to `sink` when given."""
    started = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - started
        logger.info("%s took %.3f s", label, elapsed)
        if sink is not None:
            sink.append((label, elapsed))
''')),
    "expression": Section(
        ("import math", "import re"), Template('''

_${TOPIC}_TOKEN = re.compile(r"\\s*(?:(\\d+\\.?\\d*)|(\\w+)|(.))")


def tokenize_$topic(expression: str) -> list[tuple[str, str]]:
    """(kind, text) tokens of a small expression language: numbers, names, operators."""
    tokens = []
    for number, name, operator in _${TOPIC}_TOKEN.findall(expression):
        if number:
            tokens.append(("number", number))
        elif name:
            tokens.append(("name", name))
        elif operator.strip():
            tokens.append(("op", operator))
    return tokens


def compute_$topic(tokens: list[tuple[str, str]], variables: dict[str, float]) -> float:
    """Left-to-right value of `tokens` with + - * / (no precedence, as the old tool did)."""
    total, pending = 0.0, "+"
    for kind, text in tokens:
        if kind == "op":
            pending = text
            continue
        value = float(text) if kind == "number" else variables.get(text, 0.0)
        if pending == "+":
            total += value
        elif pending == "-":
            total -= value
        elif pending == "*":
            total *= value
        elif pending == "/":
            total = total / value if value else math.inf
    return total
'''), "tokenize_$topic", "[$f(str(item)) for item in items]"),
    "level": Section(
        ("import enum",), Template('''

class ${Topic}Level(enum.Enum):
    """How loudly the $topic step reports."""

    QUIET = 0
    NORMAL = 1
    VERBOSE = 2

    @classmethod
    def parse(cls, text: str) -> ${Topic}Level:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            choices = ", ".join(level.name.lower() for level in cls)
            raise ValueError(f"unknown level {text!r} (choose from {choices})") from None
''')),
    "table": Section(
        ("from typing import Any",), Template('''

def format_${topic}_table(rows: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    """Rows as a plain-text table, each column padded to its widest cell."""
    if not rows:
        return ""
    columns = columns or list(rows[0])
    cells = [[str(row.get(column, "")) for column in columns] for row in rows]
    widths = [max(len(column), *(len(line[i]) for line in cells))
              for i, column in enumerate(columns)]
    lines = ["  ".join(column.ljust(width) for column, width in zip(columns, widths))]
    lines.append("  ".join("-" * width for width in widths))
    for line in cells:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(line, widths)))
    return "\\n".join(lines)
'''), "format_${topic}_table", '$f([{"item": str(item)} for item in items])'),
}
# Only the geometry package packs points into typed arrays (the word the engine's
# pre-filter also matches, in "array").
POINTS = Section(("from array import array",), Template('''

def pack_${topic}_points(points: list[tuple[float, float]]) -> array:
    """Points flattened into a typed buffer of doubles, x then y."""
    packed = array("d")
    for x, y in points:
        packed.extend((x, y))
    return packed


def ${topic}_bounds(packed: array) -> tuple[float, float, float, float]:
    """The bounding box of packed points: min x, min y, max x, max y."""
    xs, ys = packed[0::2], packed[1::2]
    return min(xs), min(ys), max(xs), max(ys)
'''))
USES = Template('''

def run_${topic}_$name(items: list[Any], options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Apply the imported helpers to `items` and collect what they report."""
    options = options or {}
    report: dict[str, Any] = {"items": len(items)}
$calls
    logger.debug("$name: %d items", len(items))
    return report
''')


@dataclass(frozen=True)
class Export:
    """A function a generated module offers others, and how to call it."""

    module: str  # dotted
    function: str
    call: str  # with `$f` for the function as the importer names it


@dataclass
class Repository:
    """The generated repository: its root and its files by kind."""

    root: Path
    plain: list[Path] = field(default_factory=list)
    torch: list[Path] = field(default_factory=list)
    training: list[Path] = field(default_factory=list)

    @property
    def files(self) -> list[Path]:
        return [*self.plain, *self.torch, *self.training]

    @property
    def lines(self) -> int:
        return sum(path.read_bytes().count(b"\n") for path in self.files)


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _import_lines(lines: set[str] | list[str]) -> str:
    """Import lines sorted as isort does: `import x` first, then `from x import a, b` (one
    line a module), relative imports last."""
    plain = sorted(line for line in lines if line.startswith("import "))
    names: dict[str, set[str]] = {}
    for line in lines:
        if line.startswith("from "):
            module, _, imported = line[len("from "):].partition(" import ")
            names.setdefault(module, set()).add(imported)
    froms = [f"from {module} import {', '.join(sorted(names[module]))}"
             for module in sorted(names, key=lambda module: (module.startswith("."), module))]
    return "\n".join([*plain, *froms])


def _project_imports(rng: random.Random, package: str, exports: list[Export], count: int,
                     defined: Collection[str] = ()) -> tuple[list[str], list[str]]:
    """Import lines for `count` earlier modules' functions (none that the importer defines
    itself), and the calls that use them."""
    imports, calls = [], []
    candidates = [export for export in exports if export.function not in defined]
    for export in rng.sample(candidates, min(count, len(candidates))):
        parent, _, module = export.module.rpartition(".")
        style = rng.random()
        if parent == package and style < 0.5:
            imports.append(f"from .{module} import {export.function}")
            name = export.function
        elif style < 0.7:
            imports.append(f"from {parent} import {module}")
            name = f"{module}.{export.function}"
        elif style < 0.85:
            alias = f"{module.split('_')[0]}_{len(imports)}"
            imports.append(f"import {export.module} as {alias}")
            name = f"{alias}.{export.function}"
        else:
            imports.append(f"from {export.module} import {export.function}")
            name = export.function
        calls.append(f'    report["{export.function}"] = '
                     + Template(export.call).substitute(f=name))
    return imports, calls


def _plain_module(rng: random.Random, package: str, module: str,
                  exports: list[Export]) -> tuple[str, list[Export]]:
    topic = rng.choice(TOPICS)
    values = {"topic": topic, "Topic": _camel(topic), "TOPIC": topic.upper(),
              "n1": rng.choice([8, 16, 64, 256]), "n2": rng.randint(2, 6),
              "n3": rng.choice([128, 1024, 4096]), "f1": rng.choice([0.1, 0.25, 0.5]),
              "q": rng.choice([50, 90, 95, 99]), "key": rng.choice(["id", "name", "created"]),
              "keep": rng.choice(["-_", "._", "-"]),
              "suffixes": rng.choice(['".json",', '".csv", ".tsv"', '".txt", ".md"'])}
    kinds = list(PLAIN_SECTIONS)
    rng.shuffle(kinds)
    sections = [PLAIN_SECTIONS[kind] for kind in kinds]
    if package == "geometry":
        sections.insert(0, POINTS)
    defined = {Template(s.exported).substitute(values) for s in sections if s.exported}
    dotted = f"{package.replace('/', '.')}.{module}"
    project, calls = _project_imports(rng, package.replace("/", "."), exports,
                                      rng.choice([0, 1, 1, 2, 3]), defined)
    # Sections are added while the module stays within its size (docstring, imports and
    # logger: about 10 lines; the section using the imports: 9 and one a call).
    target = rng.randint(64, 195)
    imports = {"import logging"}
    body, offered, lines = [], [], 10 + len(project) + (9 + len(calls) if calls else 0)
    for section in sections:
        code = section.code.substitute(values)
        added = code.count("\n") + len(set(section.imports) - imports)
        if lines + added > target and lines >= 60:
            continue
        body.append(code)
        lines += added
        imports.update(section.imports)
        if section.exported is not None and section.call is not None:
            offered.append(Export(dotted, Template(section.exported).substitute(values),
                                  section.call))
    if calls:
        imports.add("from typing import Any")
        body.append(USES.substitute(topic=topic, name=module, calls="\n".join(calls)))
    words = package.replace("/", " ")
    text = (f'"""{_camel(topic)} helpers of the {words} package: settings, records and '
            f'formatting."""\n\nfrom __future__ import annotations\n\n'
            + _import_lines(imports) + "\n"
            + ("\n" + _import_lines(project) + "\n" if project else "")
            + "\nlogger = logging.getLogger(__name__)\n" + "".join(body))
    return text, offered


def _module_names(rng: random.Random, count: int) -> list[str]:
    names: list[str] = []
    while len(names) < count:
        name = f"{rng.choice(TOPICS)}_{rng.choice(SUFFIXES)}"
        names.append(name if name not in names else f"{name}_{len(names)}")
    return names


# ---------------------------------------------------------------------------------------
# Torch code that does not train: models and data utilities.

TORCH_SECTIONS = {
    "block": Template('''

class ${Name}Block(nn.Module):
    """Expand, depthwise conv, project, with an optional residual connection."""

    def __init__(self, channels: int = $c, expansion: int = $e, residual: bool = True) -> None:
        super().__init__()
        hidden = channels * expansion
        self.expand = nn.Conv2d(channels, hidden, kernel_size=1, bias=False)
        self.norm1 = nn.BatchNorm2d(hidden)
        self.depthwise = nn.Conv2d(hidden, hidden, kernel_size=3, padding=1, groups=hidden,
                                   bias=False)
        self.norm2 = nn.BatchNorm2d(hidden)
        self.project = nn.Conv2d(hidden, channels, kernel_size=1, bias=False)
        self.residual = residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.norm1(self.expand(x)))
        out = F.relu(self.norm2(self.depthwise(out)))
        out = self.project(out)
        return x + out if self.residual else out
'''),
    "attention": Template('''

class ${Name}Attention(nn.Module):
    """Multi-head self-attention with an optional boolean mask."""

    def __init__(self, dim: int = $d, heads: int = $heads, dropout: float = $p) -> None:
        super().__init__()
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) * self.scale
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = self.drop(scores.softmax(dim=-1))
        return self.proj((weights @ v).transpose(1, 2).reshape(b, n, c))
'''),
    "head": Template('''

class ${Name}Head(nn.Module):
    """Norm, hidden layer and classifier over flattened features."""

    def __init__(self, in_features: int = $d, classes: int = $k, hidden: int = $h) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.LayerNorm(in_features), nn.Linear(in_features, hidden),
                                    nn.GELU(), nn.Dropout($p), nn.Linear(hidden, classes))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.layers(features.flatten(1))
'''),
    "init": Template('''

def init_${name}_weights(module: nn.Module, std: float = $std) -> None:
    """Truncated-normal linear layers, Kaiming convolutions, unit norms."""
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            nn.init.trunc_normal_(layer.weight, std=std)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)
        elif isinstance(layer, nn.Conv2d):
            nn.init.kaiming_normal_(layer.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(layer, (nn.BatchNorm2d, nn.LayerNorm)):
            nn.init.ones_(layer.weight)
            nn.init.zeros_(layer.bias)


def count_${name}_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Parameters of `model` (those that require grad, unless `trainable_only` is off)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
'''),
    "dataset": Template('''

class ${Name}Dataset(Dataset):
    """Seeded random features and labels, with an optional transform."""

    def __init__(self, size: int = $size, features: int = $d, classes: int = $k,
                 seed: int = $seed) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.inputs = torch.randn(size, features, generator=generator)
        self.labels = torch.randint(0, classes, (size,), generator=generator)
        self.transform = None

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        sample = self.inputs[index]
        if self.transform is not None:
            sample = self.transform(sample)
        return sample, self.labels[index]
'''),
    "collate": Template('''

def pad_${name}_batch(batch: list[tuple[torch.Tensor, int]], pad_value: float = 0.0
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sequences padded to the longest, their lengths, and the labels."""
    lengths = torch.tensor([item[0].shape[0] for item in batch])
    padded = torch.full((len(batch), int(lengths.max()), *batch[0][0].shape[1:]), pad_value)
    for row, (sequence, _) in enumerate(batch):
        padded[row, : sequence.shape[0]] = sequence
    labels = torch.tensor([label for _, label in batch])
    return padded, lengths, labels
'''),
    "transform": Template('''

class ${Name}Normalize:
    """Standardize a tensor, then add Gaussian noise when `noise` is positive."""

    def __init__(self, mean: float = $mean, std: float = $sd, noise: float = $noise) -> None:
        self.mean, self.std, self.noise = mean, std, noise

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = (x - self.mean) / self.std
        if self.noise > 0:
            x = x + self.noise * torch.randn_like(x)
        return x
'''),
    "loader": Template('''

def build_${name}_loader(dataset: Dataset, batch_size: int = $bs, shuffle: bool = True,
                        workers: int = 0) -> DataLoader:
    """A loader over `dataset`; the last partial batch dropped when shuffling."""
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, num_workers=workers,
                      drop_last=shuffle, pin_memory=torch.cuda.is_available())
'''),
}
NET = Template('''

class ${Name}Net(nn.Module):
    """A stem, $depth ${Block} blocks, pooling and a linear classifier."""

    def __init__(self, channels: int = $c, classes: int = $k) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, kernel_size=3, padding=1)
        self.blocks = nn.Sequential(*[${Block}Block(channels) for _ in range($depth)])
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.head(self.pool(x).flatten(1))
''')
MODEL_NAMES = ("residual", "mobile", "convnext", "vit", "mixer", "unet", "fpn", "encoder",
               "decoder", "bottleneck", "pyramid", "stem", "neck", "pooling", "embedding")
DATA_NAMES = ("coco", "voc", "imagenet", "cifar", "speech", "text", "tabular", "video",
              "points")


def _torch_module(rng: random.Random, package: str, module: str, blocks: list[str],
                  exports: list[Export]) -> str:
    """A model module (`modeling`) or a data module (`data`)."""
    name = _camel(module)
    values = {"Name": name, "name": module, "c": rng.choice([16, 32, 64]),
              "e": rng.choice([2, 4, 6]), "d": rng.choice([64, 128, 256]),
              "heads": rng.choice([2, 4, 8]), "p": rng.choice([0.0, 0.1]),
              "k": rng.choice([10, 100, 1000]), "h": rng.choice([256, 512]),
              "std": rng.choice([0.02, 0.01]), "size": rng.choice([256, 1024]),
              "seed": rng.randint(0, 999), "mean": rng.choice([0.0, 0.5]),
              "sd": rng.choice([1.0, 0.25]), "noise": rng.choice([0.0, 0.01]),
              "bs": rng.choice([16, 32, 64]), "depth": rng.randint(2, 6)}
    if package == "modeling":
        kinds = ["block", *rng.sample(["attention", "head", "init"], rng.randint(1, 3))]
        header = "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n"
    else:
        kinds = ["dataset", *rng.sample(["collate", "transform", "loader"], rng.randint(1, 3))]
        header = "import torch\nfrom torch.utils.data import DataLoader, Dataset\n"
    body = [TORCH_SECTIONS[kind].substitute(values) for kind in kinds]
    project = []
    if package == "modeling" and blocks and rng.random() < 0.6:
        other = rng.choice(blocks)
        project.append(f"from .{other} import {_camel(other)}Block")
        body.append(NET.substitute(values, Block=_camel(other)))
    imports, calls = _project_imports(rng, package, exports, rng.randint(1, 2))
    project += imports
    body.append(USES.substitute(topic=module, name="summary", calls="\n".join(calls)))
    what = "Model components" if package == "modeling" else "Datasets and loaders"
    return (f'"""{what}: {module.replace("_", " ")}."""\n\nfrom __future__ import annotations\n\n'
            f"import logging\nfrom typing import Any\n\n{header}\n"
            + _import_lines(project) + "\n\nlogger = logging.getLogger(__name__)\n"
            + "".join(body))


# ---------------------------------------------------------------------------------------
# Training code, in the shapes of real projects (DETR, SupContrast, a trainer class).

# The training modules are the project fixtures' inputs (fixtures/projects/), as they are.
PROJECTS = ROOT / "fixtures" / "projects"
DETR_MAIN, DETR_ENGINE, DETR_MISC, DETR_MODELS = (
    (PROJECTS / "engine_function" / "input" / name).read_text(encoding="utf-8")
    for name in ("main.py", "engine.py", "util/misc.py", "models.py"))
SUPCON_MAIN, SUPCON_UTIL = (
    (PROJECTS / "helper_module_checkpoints" / "input" / name).read_text(encoding="utf-8")
    for name in ("main_ce.py", "util.py"))
TRAINER_SCRIPT, TRAINER_CLASS = (
    (PROJECTS / "trainer_receives_optimizer" / "input" / name).read_text(encoding="utf-8")
    for name in ("train.py", "trainer.py"))


def _adjusted(template: str, *replacements: tuple[str, str]) -> str:
    """`template` with each (old, new) replaced; every `old` must occur in it."""
    for old, new in replacements:
        if old not in template:
            raise ValueError(f"{old!r} is not in the template")
        template = template.replace(old, new)
    return template


def _training_files(data_module: str, plain_module: str) -> dict[str, str]:
    """The training modules (and their packages' `__init__.py` and `models.py`), by path.

    The root copy of DETR imports as a script imports its neighbours, with the distributed
    helpers in `utils.py`; `main.py` also reads the repository's datasets and logging setup.
    The `detection/` copy imports relatively, `contrastive/` and `trainers/` absolutely."""
    data_package, _, data_name = data_module.rpartition(".")
    plain_package, _, plain_name = plain_module.rpartition(".")
    imports = "from models import SetCriterion, build_model\n"
    return {
        "main.py": _adjusted(DETR_MAIN, ("import util.misc as utils\n", "import utils\n"), (
            imports, f"{imports}from {data_package}.{data_name} import {_camel(data_name)}"
                     f"Dataset\nfrom {plain_package} import {plain_name}\n")),
        "engine.py": DETR_ENGINE,
        "utils.py": _adjusted(DETR_MISC, ("util/misc.py", "utils.py")),
        "models.py": DETR_MODELS,
        "detection/__init__.py": '"""DETR, packaged: run as `python -m detection.main`."""\n',
        "detection/main.py": _adjusted(
            DETR_MAIN, ("import util.misc as utils", "from .util import misc as utils"),
            ("from engine import", "from .engine import"),
            ("from models import", "from .models import")),
        "detection/engine.py": DETR_ENGINE,
        "detection/util/__init__.py": "",
        "detection/util/misc.py": DETR_MISC,
        "detection/models.py": DETR_MODELS,
        "contrastive/__init__.py": '"""Supervised contrastive learning (cross-entropy)."""\n',
        "contrastive/main_ce.py": _adjusted(
            SUPCON_MAIN, ("from util import", "from contrastive.util import")),
        "contrastive/util.py": SUPCON_UTIL,
        "trainers/__init__.py": '"""A trainer class, and the script that drives it."""\n',
        "trainers/train.py": _adjusted(
            TRAINER_SCRIPT, ("from trainer import", "from trainers.trainer import")),
        "trainers/trainer.py": TRAINER_CLASS,
    }


def generate(root: Path, seed: int = SEED) -> Repository:
    """Write the repository into `root` (which must not exist or be empty)."""
    rng = random.Random(seed)
    repo = Repository(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(PYPROJECT)

    def write(relative: str, text: str, kind: list[Path]) -> None:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        kind.append(path)

    training = _training_files("data.x", "common.x")  # only to count its files
    inits = [p for p in training if p.endswith("__init__.py")]
    models = [p for p in training if p.endswith("models.py")]
    torch_packages = ("modeling", "data")
    plain_count = PLAIN_MODULES - len(PLAIN_PACKAGES) - len(torch_packages) - len(inits)
    names = _module_names(rng, plain_count)
    exports: list[Export] = []
    for index, name in enumerate(names):
        package = PLAIN_PACKAGES[index * len(PLAIN_PACKAGES) // plain_count]
        text, offered = _plain_module(rng, package, name, exports)
        write(f"{package}/{name}.py", text, repo.plain)
        exports.extend(offered)
    for package in (*PLAIN_PACKAGES, *torch_packages):
        words = package.replace("/", " ")
        write(f"{package}/__init__.py", f'"""The {words} package."""\n', repo.plain)

    torch_count = TORCH_MODULES - len(models)
    modeling = [f"{rng.choice(MODEL_NAMES)}_{index}" for index in range(torch_count * 3 // 5)]
    data = [f"{rng.choice(DATA_NAMES)}_{index}" for index in range(torch_count - len(modeling))]
    for index, module in enumerate(modeling):
        write(f"modeling/{module}.py",
              _torch_module(rng, "modeling", module, modeling[:index], exports), repo.torch)
    for module in data:
        write(f"data/{module}.py", _torch_module(rng, "data", module, [], exports), repo.torch)

    for relative, text in _training_files(f"data.{data[0]}", exports[0].module).items():
        kind = (repo.plain if relative in inits else repo.torch if relative in models
                else repo.training)
        write(relative, text, kind)
    return repo


# ---------------------------------------------------------------------------------------
# Measuring.

def best_times(commands: dict[str, tuple[list[str], Path]],
               runs: int) -> tuple[dict[str, float], dict[str, float]]:
    """Best wall time and best CPU time (user + system, the process and the workers it
    started; seconds) of each command, run in turns `runs` times after one warm-up round
    (dropped); every `amprewrite --check` must exit 0 or 1, or 123 where a named file's
    training step continues in a file not named (AMP450, which `verdicts` checks). CPU time
    is what other work on the machine changes least."""
    wall: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    for index in range(runs + 1):
        for name, (command, cwd) in commands.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            done = subprocess.run(command, env=environment(), capture_output=True, cwd=cwd,
                                  check=False)
            elapsed = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if done.returncode not in (0, 1, 123):
                raise RuntimeError(f"{name} failed (exit {done.returncode}):\n"
                                   f"{done.stderr.decode(errors='replace')[-3000:]}")
            if index:
                wall[name].append(elapsed)
                cpu[name].append(after.ru_utime - before.ru_utime
                                 + after.ru_stime - before.ru_stime)
        if index:
            h.progress(f"round {index}/{runs}: " + ", ".join(
                f"{name} {values[-1]:.2f} s" for name, values in wall.items()))
    return ({name: min(values) for name, values in wall.items()},
            {name: min(values) for name, values in cpu.items()})


def reached(repo: Path, named: list[Path]) -> dict[str, object]:
    """What project mode reads for the named files, counted by wrapping the functions
    `load_program` calls: files read (imports followed, importers searched), outlined with
    Python's ast (those that mention torch), and the modules of the groups libcst links."""
    read: set[Path] = set()
    outlined: set[Path] = set()

    def reading(path: Path, limit: int | None = None) -> bytes:
        read.add(path)
        return read_source(path, limit)

    def outlining(path: Path, source: bytes, finder: object) -> object:
        outlined.add(path)
        return outline(path, source, finder)  # type: ignore[arg-type]

    with mock.patch.object(program, "read_source", reading), \
            mock.patch.object(program, "outline", outlining):
        started = time.perf_counter()
        loaded = program.load_program({path.resolve(): str(path) for path in named})
        elapsed = time.perf_counter() - started
    linked = {path for group in loaded.groups for path in group}

    def shown(paths: set[Path]) -> list[str]:
        return sorted(path.relative_to(repo.resolve()).as_posix() for path in paths)

    return {"named": len(named), "read": len(read), "outlined": len(outlined),
            "linked": len(linked), "load_program_ms": elapsed * 1000,
            "outlined_files": shown(outlined), "linked_files": shown(linked)}


def project_phase_seconds(named: list[Path], runs: int) -> float:
    """Best time of the CLI's project phase for the named files, in this process."""
    paths = {path.resolve(): str(path) for path in named}
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        rewrite_project(paths, Options(opt_level="O1"), write=False)
        times.append(time.perf_counter() - started)
    return min(times)


def verdicts(command: list[str], cwd: Path) -> dict[str, object]:
    """The files `amprewrite --check --output-format json` would rewrite, the finding codes
    it reports (with counts), and the findings about processing (AMP003/AMP004, AMP45x)."""
    done = subprocess.run([*command, "--output-format", "json"], env=environment(),
                          capture_output=True, cwd=cwd, check=False)
    document = json.loads(done.stdout) if done.stdout else {"files": []}
    unexpected = [finding["code"] for file in document["files"] if file["status"] == "failed"
                  for finding in file["findings"] if finding["code"] != "AMP450"]
    if done.returncode not in (0, 1, 123) or unexpected:
        raise RuntimeError(f"{command} failed (exit {done.returncode}):\n"
                           f"{done.stderr.decode(errors='replace')[-3000:]}")
    codes: dict[str, int] = {}
    problems = []
    for file in document["files"]:
        for finding in file["findings"]:
            codes[finding["code"]] = codes.get(finding["code"], 0) + 1
            if finding["code"] in ("AMP003", "AMP004") or finding["code"].startswith("AMP45"):
                problems.append(f"{file['path']}:{finding['line']}: {finding['code']} "
                                f"{finding['message']}")
    return {"changed": sorted(f["path"] for f in document["files"]
                              if f["status"] == "would be rewritten"),
            "failed": sorted(f["path"] for f in document["files"] if f["status"] == "failed"),
            "codes": dict(sorted(codes.items())), "problems": problems,
            "summary": document["summary"]}


def print_text_table(headers: list[str], rows: list[list[str]], align: str) -> None:
    """The same table as `h.print_table`, without Markdown's pipes."""
    widths = [max(len(row[column]) for row in [headers, *rows]) for column in range(len(headers))]

    def line(cells: list[str]) -> str:
        return "  ".join(cell.ljust(width) if side == "l" else cell.rjust(width)
                         for cell, width, side in zip(cells, widths, align, strict=True))

    print(line(headers))
    print("  ".join("-" * width for width in widths))
    for row in rows:
        print(line(row))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each (best of)")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="generate the repository into DIR and keep it there")
    args = parser.parse_args()

    compileall.compile_dir(ROOT / "amprewrite", quiet=1)
    info = h.machine()
    print(h.describe(info))
    with tempfile.TemporaryDirectory(prefix="amprewrite-project-") as directory:
        temporary = Path(directory)
        repo = generate(args.keep or temporary / "repo")
        single = temporary / "single"
        single.mkdir()
        shutil.copyfile(SINGLE_FILE, single / "train.py")
        (single / "pyproject.toml").write_text(PYPROJECT)
        files = repo.files
        h.progress(f"repository: {len(files)} Python files ({len(repo.plain)} plain, "
                   f"{len(repo.torch)} torch, {len(repo.training)} training), "
                   f"{repo.lines:,} lines")
        check = [*amprewrite_command(), "--check", "-q"]
        commands = {
            "repo_jobs1": ([*check, "--jobs", "1", "."], repo.root),
            "repo_jobs_default": ([*check, "."], repo.root),
            "named_main": ([*check, "main.py"], repo.root),
            "named_engine": ([*check, "engine.py"], repo.root),
            "single_file": ([*check, "train.py"], single),
            "import_libcst": ([sys.executable, "-c", "import libcst"], temporary),
        }
        best, cpu = best_times(commands, args.runs)
        counts = {"repo_jobs1": reached(repo.root, files),
                  "named_main": reached(repo.root, [repo.root / "main.py"]),
                  "named_engine": reached(repo.root, [repo.root / "engine.py"]),
                  "single_file": reached(single, [single / "train.py"])}
        counts["repo_jobs_default"] = counts["repo_jobs1"]
        phase = {"repo_jobs1": project_phase_seconds(files, args.runs),
                 "named_main": project_phase_seconds([repo.root / "main.py"], args.runs),
                 "named_engine": project_phase_seconds([repo.root / "engine.py"], args.runs)}
        phase["repo_jobs_default"] = phase["repo_jobs1"]
        phase["single_file"] = project_phase_seconds([single / "train.py"], args.runs)
        outcomes = {"repo": verdicts(commands["repo_jobs1"][0], repo.root),
                    "named_main": verdicts(commands["named_main"][0], repo.root),
                    "named_engine": verdicts(commands["named_engine"][0], repo.root),
                    "single_file": verdicts(commands["single_file"][0], single)}
        plain_prefiltered = sum(bool(MAY_TRAIN.search(p.read_bytes())) for p in repo.plain)
        lines = repo.lines

    labels = {"repo_jobs1": f"`--check -q --jobs 1 REPO` ({len(files)} files)",
              "repo_jobs_default": f"`--check -q REPO` (--jobs {os.cpu_count()})",
              "named_main": "`--check -q main.py` (in REPO)",
              "named_engine": "`--check -q engine.py` (in REPO: importers searched)",
              "single_file": "`--check -q train.py` (toplevel_loop, alone)",
              "import_libcst": '`python -c "import libcst"`'}
    rows = []
    for name, label in labels.items():
        count = counts.get(name)
        cells = ([str(count["named"]), str(count["read"]), str(count["outlined"]),
                  str(count["linked"]), f"{phase[name] * 1000:,.0f}"]
                 if count else ["", "", "", "", ""])
        rows.append([label, *cells, f"{best[name] * 1000:,.0f}",
                     f"{best[name] / best['import_libcst']:.2f}", f"{cpu[name] * 1000:,.0f}"])
    headers = ["run", "named", "read", "outlined (ast)", "linked (libcst)",
               "project phase ms", f"wall ms (best of {args.runs})", "/ import libcst",
               "CPU ms"]
    table = h.print_table if args.markdown else print_text_table
    print(f"\nrepository: {len(files)} Python files, {lines:,} lines: {len(repo.plain)} "
          f"without torch ({plain_prefiltered} of them pass the engine's pre-filter), "
          f"{len(repo.torch)} torch modules that do not train, {len(repo.training)} training "
          f"modules\n")
    table(headers, rows, "lrrrrrrrr")
    print()
    for name, outcome in outcomes.items():
        print(f"{name}: {outcome['summary'].strip()}; would change: "
              f"{', '.join(outcome['changed']) or 'nothing'}")  # type: ignore[arg-type]
        for problem in outcome["problems"]:  # type: ignore[attr-defined]
            print(f"  {problem}")
    print(f"main.py: outlines {', '.join(counts['named_main']['outlined_files'])} "  # type: ignore[arg-type]
          f"(and reads {counts['named_main']['read'] - counts['named_main']['outlined']} "
          "files without torch, or not importing it)")
    h.write_json(args.json, {"benchmark": "project_speed", "machine": info, "runs": args.runs,
                             "files": len(files), "lines": lines, "plain": len(repo.plain),
                             "plain_prefiltered": plain_prefiltered, "torch": len(repo.torch),
                             "training": len(repo.training), "best_seconds": best,
                             "best_cpu_seconds": cpu, "project_phase_seconds": phase,
                             "reached": counts, "outcomes": outcomes})


if __name__ == "__main__":
    main()
