"""Training scripts assembled from parts, for the property tests."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Parts:
    shape: str  # "toplevel", "function" or "method"
    clip: bool
    accumulate: bool
    two_optimizers: bool
    checkpoint: bool
    evaluate: bool
    taken_scaler_name: bool
    comments: bool
    odd_formatting: bool


HEADER = """import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
DATA = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(8)]
CKPT = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
"""


def script(parts: Parts) -> str:
    lines = [HEADER]
    if parts.taken_scaler_name:
        lines.append("scaler = {'mean': 0.0, 'std': 1.0}  # a feature scaler, not a grad one\n")
    body = _step(parts, "        " if parts.shape != "toplevel" else "    ")
    if parts.shape == "toplevel":
        lines.append(_models("") + "for i, (x, y) in enumerate(DATA):\n" + body + _after(parts, ""))
    elif parts.shape == "function":
        lines.append(_train_function(parts, body))
    else:
        lines.append(_trainer_class(parts, body))
    return "\n".join(lines)


def _models(indent: str, prefix: str = "") -> str:
    return (f"{indent}{prefix}model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))\n"
            f"{indent}{prefix}aux = nn.Linear(4, 1)\n"
            f"{indent}{prefix}optimizer = torch.optim.SGD({prefix}model.parameters(), lr=0.01)\n"
            f"{indent}{prefix}aux_optimizer = torch.optim.Adam({prefix}aux.parameters())\n")


def _step(parts: Parts, indent: str, prefix: str = "") -> str:
    comment = f"{indent}# forward pass\n" if parts.comments else ""
    if parts.odd_formatting:
        loss = (f"{indent}loss = F.mse_loss(\n{indent}    out,\n{indent}    y,\n{indent})\n\n")
    else:
        loss = f"{indent}loss = F.mse_loss(out, y)\n"
    step = [f"{indent}{prefix}optimizer.zero_grad()\n", comment,
            f"{indent}out = {prefix}model(x)\n", loss]
    if parts.two_optimizers:  # gradients never zeroed keep a float16 overflow's inf forever
        step.insert(1, f"{indent}{prefix}aux_optimizer.zero_grad()\n")
    if parts.accumulate:
        step.append(f"{indent}loss = loss / 2\n")
    step.append(f"{indent}loss.backward()\n")
    if parts.two_optimizers:
        step += [f"{indent}aux_loss = F.mse_loss({prefix}aux(x), y)\n",
                 f"{indent}aux_loss.backward()\n"]
    inner = indent + ("    " if parts.accumulate else "")
    if parts.accumulate:
        step.append(f"{indent}if (i + 1) % 2 == 0:\n")
    if parts.clip:
        step.append(f"{inner}torch.nn.utils.clip_grad_norm_({prefix}model.parameters(), 1.0)"
                    + ("  # keep it stable\n" if parts.comments else "\n"))
    step.append(f"{inner}{prefix}optimizer.step()\n")
    if parts.two_optimizers:
        step.append(f"{inner}{prefix}aux_optimizer.step()\n")
    return "".join(step)


def _after(parts: Parts, indent: str, prefix: str = "") -> str:
    text = ""
    if parts.checkpoint:
        text += (f"{indent}torch.save({{'model': {prefix}model.state_dict(), "
                 f"'optimizer': {prefix}optimizer.state_dict()}}, CKPT)\n"
                 f"{indent}checkpoint = torch.load(CKPT)\n"
                 f"{indent}{prefix}optimizer.load_state_dict(checkpoint['optimizer'])\n")
    if parts.evaluate:
        text += (f"{indent}with torch.no_grad():\n"
                 f"{indent}    val = F.mse_loss({prefix}model(DATA[0][0]), DATA[0][1]).item()\n"
                 f"{indent}print('val', val)\n")
    return text


def _train_function(parts: Parts, body: str) -> str:
    return ("def train(model, aux, optimizer, aux_optimizer):\n"
            "    for i, (x, y) in enumerate(DATA):\n" + body
            + ("    torch.save({'model': model.state_dict(), 'optimizer': optimizer.state_dict()},"
               " CKPT)\n" if parts.checkpoint else "")
            + "\n\ndef main():\n" + _models("    ")
            + "    train(model, aux, optimizer, aux_optimizer)\n"
            + (_after(parts, "    ") if parts.evaluate else "")
            + "\n\nif __name__ == '__main__':\n    main()\n")


def _trainer_class(parts: Parts, body: str) -> str:
    method_body = _step(parts, "            ", "self.")
    return ("class Trainer:\n    def __init__(self):\n" + _models("        ", "self.")
            + "\n    def fit(self):\n        for i, (x, y) in enumerate(DATA):\n" + method_body
            + _after(parts, "        ", "self.")
            + "\n\nTrainer().fit()\n")
