"""A generated corpus of training scripts for the codemod's speed benchmark.

Each file is one of the fixtures' FP32 training scripts (every shape of training step the
rewrite knows: top-level loops, train functions, trainer classes, GANs, accumulation,
checkpoints, frameworks, migrations) with the code that surrounds a training step in a real
repository added after its imports: model and dataset classes, argument parsing, metrics,
schedules. The helpers vary in size and names from file to file (a seeded random choice), so
the corpus is deterministic and no two files are alike.

    python benchmarks/corpus.py OUT_DIR [--files N]
"""

from __future__ import annotations

import argparse
import ast
import random
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

HELPERS_HEADER = "import argparse\nimport math\n\nimport torch\n"

MODEL = '''

class {name}(torch.nn.Module):
    """A {depth}-block residual MLP ({width} wide) with layer norm and dropout."""

    def __init__(self, in_features: int = {width}, classes: int = {classes}) -> None:
        super().__init__()
        self.stem = torch.nn.Linear(in_features, {width})
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(
                torch.nn.LayerNorm({width}),
                torch.nn.Linear({width}, {hidden}),
                torch.nn.GELU(),
                torch.nn.Dropout({dropout}),
                torch.nn.Linear({hidden}, {width}),
            )
            for _ in range({depth})
        )
        self.head = torch.nn.Linear({width}, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = x + block(x)  # residual connection
        return self.head(x)
'''

DATASET = '''

class {name}(torch.utils.data.Dataset):
    """{size} random samples of {features} features, {classes} classes (seeded)."""

    def __init__(self, size: int = {size}, seed: int = {seed}) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.inputs = torch.randn(size, {features}, generator=generator)
        self.labels = torch.randint(0, {classes}, (size,), generator=generator)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs[index], self.labels[index]
'''

ARGUMENTS = '''

def {name}(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options of the experiment."""
    parser = argparse.ArgumentParser(description="{description}")
    parser.add_argument("--epochs", type=int, default={epochs})
    parser.add_argument("--batch-size", type=int, default={batch})
    parser.add_argument("--lr", type=float, default={lr})
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    parser.add_argument("--warmup-steps", type=int, default={warmup})
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--output", default="runs/{description}")
    return parser.parse_args(argv)
'''

METRICS = '''

class {meter}:
    """Running average of a metric over an epoch."""

    def __init__(self) -> None:
        self.total = 0.0
        self.count = 0

    def update(self, value: float, n: int = 1) -> None:
        self.total += value * n
        self.count += n

    @property
    def average(self) -> float:
        return self.total / max(self.count, 1)


def {accuracy}(logits: torch.Tensor, labels: torch.Tensor, top_k: int = {top_k}) -> float:
    """Fraction of samples whose label is among the `top_k` highest logits."""
    best = logits.topk(top_k, dim=-1).indices
    return (best == labels.unsqueeze(-1)).any(dim=-1).float().mean().item()
'''

SCHEDULE = '''

def {name}(step: int, warmup: int = {warmup}, total: int = {total}) -> float:
    """Learning-rate factor: linear warm-up, then cosine decay to {floor}."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return {floor} + (1 - {floor}) * 0.5 * (1 + math.cos(math.pi * progress))
'''


def helpers(rng: random.Random, index: int) -> str:
    """The non-training code of one file: helper sections of three to five kinds, each kind
    two to four times under other names, in random order."""
    kinds = [_model, _dataset, _arguments, _metrics, _schedule]
    rng.shuffle(kinds)
    chosen = kinds[: rng.randint(3, len(kinds))]
    return "".join(kind(rng, f"{index}_{copy}")
                   for copy in range(rng.randint(2, 4)) for kind in chosen)


def _model(rng: random.Random, suffix: str) -> str:
    width = rng.choice([64, 128, 256, 512])
    return MODEL.format(name=f"ResidualMLP{suffix}", depth=rng.randint(2, 6), width=width,
                        hidden=width * rng.choice([2, 4]), classes=rng.choice([10, 100, 1000]),
                        dropout=rng.choice([0.0, 0.1, 0.2]))


def _dataset(rng: random.Random, suffix: str) -> str:
    return DATASET.format(name=f"RandomDataset{suffix}", size=rng.choice([512, 1024, 4096]),
                          features=rng.choice([64, 128, 256]), classes=rng.choice([10, 100]),
                          seed=rng.randint(0, 1000))


def _arguments(rng: random.Random, suffix: str) -> str:
    return ARGUMENTS.format(name=f"parse_arguments_{suffix}", description=f"experiment-{suffix}",
                            epochs=rng.randint(1, 90), batch=rng.choice([32, 64, 128, 256]),
                            lr=rng.choice([0.1, 0.01, 3e-4]), warmup=rng.choice([0, 100, 500]))


def _metrics(rng: random.Random, suffix: str) -> str:
    return METRICS.format(meter=f"AverageMeter{suffix}", accuracy=f"top_k_accuracy_{suffix}",
                          top_k=rng.choice([1, 5]))


def _schedule(rng: random.Random, suffix: str) -> str:
    return SCHEDULE.format(name=f"lr_factor_{suffix}", warmup=rng.choice([100, 500, 2000]),
                           total=rng.choice([10_000, 50_000]), floor=rng.choice([0.0, 0.01]))


def header_end(source: str) -> int:
    """Offset just after the leading docstring and imports of `source`."""
    body = ast.parse(source).body
    end_line = 0
    for position, statement in enumerate(body):
        docstring = (position == 0 and isinstance(statement, ast.Expr)
                     and isinstance(statement.value, ast.Constant))
        if not (docstring or isinstance(statement, ast.Import | ast.ImportFrom)):
            break
        end_line = statement.end_lineno or end_line
    lines = source.splitlines(keepends=True)
    return sum(len(line) for line in lines[:end_line])


def training_scripts() -> list[Path]:
    """The fixtures' FP32 inputs that are training scripts (their O1 rewrite changes them)."""
    return [path for path in sorted(FIXTURES.glob("*/input.py"))
            if (path.parent / "expected_O1.py").exists()
            and path.read_bytes() != (path.parent / "expected_O1.py").read_bytes()]


def generate(directory: Path, files: int, seed: int = 0) -> list[Path]:
    """Write `files` training scripts into `directory`; their paths."""
    rng = random.Random(seed)
    scripts = training_scripts()
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for index in range(files):
        template = scripts[index % len(scripts)]
        source = template.read_text(encoding="utf-8")
        cut = header_end(source)
        text = (source[:cut] + "\n" + HELPERS_HEADER + helpers(rng, index).rstrip("\n")
                + "\n\n" + source[cut:])
        path = directory / f"train_{index:04d}_{template.parent.name}.py"
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--files", type=int, default=240)
    args = parser.parse_args()
    paths = generate(args.directory, args.files)
    lines = sum(path.read_text(encoding="utf-8").count("\n") for path in paths)
    print(f"{len(paths)} files, {lines} lines in {args.directory}")


if __name__ == "__main__":
    main()
