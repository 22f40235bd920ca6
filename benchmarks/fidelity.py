"""Fidelity: the loss after N steps of amprewrite's O1 rewrite against the FP32 script, for
each benchmark model, with the hand-written torch.amp script as the reference for what mixed
precision costs anyway.

    python benchmarks/fidelity.py [--models mlp cnn lm tiny_mlp] [--device cpu|cuda ...]
                                  [--steps N] [--json OUT.json]

Every variant starts from the same seed and trains on the same data. The relative difference
is |loss - fp32 loss| / |fp32 loss| at the last step; "rewrite vs hand" is the largest
difference between the two mixed-precision loss curves, which run the same operations and
should agree closely (exactly on the CPU).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import _harness as h

MODELS = ("mlp", "cnn", "lm", "tiny_mlp")


def compare(losses: dict[str, list[float]]) -> dict[str, object]:
    """Final losses, their relative differences to FP32 and the rewrite-hand curve gap."""
    final = {variant: curve[-1] for variant, curve in losses.items()}
    return {
        "final_loss": final,
        "rewrite_rel_diff": abs(final["rewrite"] - final["fp32"]) / abs(final["fp32"]),
        "hand_rel_diff": abs(final["hand"] - final["fp32"]) / abs(final["fp32"]),
        "rewrite_vs_hand_max_abs": max(abs(a - b) for a, b in zip(
            losses["rewrite"], losses["hand"], strict=True)),
        "losses": losses,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    h.add_device_option(parser)
    parser.add_argument("--steps", type=int, default=30, help="training steps (default: 30)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    devices = h.chosen_devices(parser, args)
    if args.steps < 1:
        parser.error("--steps must be at least 1")

    info = h.machine()
    print(h.describe(info))
    results = []
    with tempfile.TemporaryDirectory() as directory:
        scripts = {model: h.variant_scripts(model, Path(directory)) for model in args.models}
        for config in h.configurations(devices):
            for model in args.models:
                h.progress(f"{model} {config.device} {config.dtype}: {args.steps} steps")
                losses = {variant: h.run_script(path, config, args.steps)["losses"]
                          for variant, path in scripts[model].items()}
                results.append({"model": model, "device": config.device, "dtype": config.dtype,
                                "steps": args.steps, **compare(losses)})

    h.print_table(
        ["model", "device", "dtype", "fp32 loss", "rewrite loss", "hand loss", "rewrite rel diff",
         "hand rel diff", "rewrite vs hand"],
        [[r["model"], r["device"], r["dtype"],
          *(f"{r['final_loss'][variant]:.5f}" for variant in h.VARIANTS),
          f"{r['rewrite_rel_diff']:.2e}", f"{r['hand_rel_diff']:.2e}",
          f"{r['rewrite_vs_hand_max_abs']:.2e}"] for r in results],
        align="lllrrrrrr")
    h.write_json(args.json, {"benchmark": "fidelity", "steps": args.steps, "machine": info,
                             "results": results})


if __name__ == "__main__":
    main()
