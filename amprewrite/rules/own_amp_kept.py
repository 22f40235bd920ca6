"""The script's own mixed precision, kept as written, and said where it is not plain: the
flag that turns it on (and whether it trains in FP32 without it), and deprecated
`torch.cuda.amp` names used as values, which keep the file from being migrated."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amprewrite.analysis.amp_flags import AmpFlag
from amprewrite.analysis.existing_amp import OPTIONAL_APEX_KEPT
from amprewrite.analysis.training_step import Note
from amprewrite.catalog import SKIP, declare
from amprewrite.rules.context import RuleContext
from amprewrite.rules.registry import Example, rule
from amprewrite.rules.shared_examples import MIXED_PRECISION_ALREADY

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis

OWN_AMP_BEHIND_FLAG = declare(
    "AMP611", SKIP, "the script's own mixed precision is behind its flag, kept",
    "Every grad scaler and autocast of the script is behind one flag (`if args.amp:`, "
    "`enabled=use_amp`, `enabled=not args.noamp`): it is kept as written, and the message "
    "says whether the script trains in FP32 without the flag. Run with the flag to train "
    "in mixed precision.",
    why="The script's own AMP runs only when one of its flags (or options) says so.",
    example=(
        "parser.add_argument(\"--amp\", action=\"store_true\")\n"
        "scaler = torch.amp.GradScaler(enabled=args.amp)   # off unless --amp"
    ),
)

DEPRECATED_VALUE_KEPT = declare(
    "AMP403", SKIP, "deprecated `torch.cuda.amp` name used as a value, kept",
    "A `torch.cuda.amp` class or decorator handed around as a value (`ac = autocast`, "
    "`autocast if amp else nullcontext`) is called where the device type `torch.amp` needs "
    "cannot be added: the file's deprecated AMP is left as written. Name the device there "
    "(`functools.partial(torch.amp.autocast, \"cuda\")`) and run again.",
    why=(
        "A deprecated `torch.cuda.amp` / `torch.cpu.amp` name is used other than by a call, "
        "a decorator or `functools.partial`."
    ),
    example="autocast_fn = torch.cuda.amp.autocast if args.amp else contextlib.nullcontext",
)


def flag_message(flag: AmpFlag) -> str:
    """"`--amp` (`args.amp`) turns this script's own mixed precision on; by default it
    trains in FP32"."""
    named = f"`{flag.option}` (`{flag.key}`)" if flag.option else f"`{flag.key}`"
    turns = "on" if flag.on_when_true else "off"
    default = {False: "by default it trains in FP32", True: "by default it trains in mixed "
               "precision", None: "kept as written"}[flag.on_by_default]
    return f"{named} turns this script's own mixed precision {turns}; {default}"


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    apex = analysis.amp_in_training.optional_apex
    if apex is not None:  # `--plain` has no opt level to turn the scaler off on its path
        ctx.notes.append(Note(OPTIONAL_APEX_KEPT, apex.node, (
            f"apex's FP16 path, taken {apex.taken}, is the file's only mixed precision, "
            "and `--plain` cannot turn a grad scaler off on that path: the file is left "
            "as written (without `--plain` its FP32 training step is rewritten)")))
    flag = analysis.amp_flag
    if flag is not None:
        ctx.notes.append(Note(OWN_AMP_BEHIND_FLAG, flag.node, flag_message(flag)))
    ctx.notes.extend(Note(DEPRECATED_VALUE_KEPT, node, (
        f"`{ctx.facts.one_line(node)}` is used here as a value, not called: its calls cannot be "
        "given the device type `torch.amp` needs, so this file's deprecated AMP stays as "
        "written")) for node in analysis.deprecated.values)


_OWN_AMP_KEPT_EXAMPLES = (
    Example(
        before="""\
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--amp", action="store_true")
args = parser.parse_args()
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler(enabled=args.amp)
for x, y in loader:
    optimizer.zero_grad()
    with torch.autocast("cuda", enabled=args.amp):
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        after=None,
        codes=(OWN_AMP_BEHIND_FLAG,),
    ),
    Example(
        before="""\
import torch
from torch.cuda.amp import autocast

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler()
amp_autocast = autocast
for x, y in loader:
    optimizer.zero_grad()
    with amp_autocast():
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        after=None,
        codes=(DEPRECATED_VALUE_KEPT,),
    ),
    Example(
        before=MIXED_PRECISION_ALREADY,
        after=None,
        codes=(),
    ),
)


RULE = rule("own-amp-kept", (OWN_AMP_BEHIND_FLAG, DEPRECATED_VALUE_KEPT), _plan,
            examples=_OWN_AMP_KEPT_EXAMPLES, reports=(OPTIONAL_APEX_KEPT,))
