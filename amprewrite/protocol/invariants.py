"""The invariants of the AMP protocol the checker enforces, each a finding code, and the
violations it reports."""

from __future__ import annotations

from dataclasses import dataclass

from amprewrite.catalog import SKIP, Code, declare

_REJECTED = ("Not written: the edits of the function holding this site (of the whole file, where "
             "they cannot be separated) are undone, and the code stays as it was. The planner "
             "went wrong here and the independent protocol check caught it: please report it.")

SCALER_MAYBE_NONE = declare(
    "AMP701", SKIP, "rewrite rejected: a scaler may be None or unbound where it is used",
    _REJECTED,
    why="On some path a method of a grad scaler is called while the scaler is None, disabled "
        "by a flag that path contradicts, or not bound at all.",
    example=(
        "scaler = None\n"
        "if args.amp:\n"
        "    scaler = torch.amp.GradScaler()\n"
        "if scaler is None:\n"
        "    scaler.scale(loss).backward()  # AttributeError: 'NoneType'"
    ),
)
UNSCALED_INTO_SCALED_STEP = declare(
    "AMP702", SKIP, "rewrite rejected: a scaled step applies gradients of an unscaled backward",
    _REJECTED,
    why="`scaler.step(optimizer)` applies gradients that a backward not scaled by that scaler "
        "produced since the optimizer was last zeroed or stepped: the step divides them by "
        "the scale too.",
    example=(
        "d_real.backward(mone)\n"
        "scaler.scale(penalty).backward()\n"
        "scaler.step(opt)  # d_real's gradients divided by 65536"
    ),
)
STEPPED_TWICE = declare(
    "AMP703", SKIP, "rewrite rejected: an optimizer stepped twice between two `update()`s",
    _REJECTED,
    why="One optimizer goes through `scaler.step` twice without `scaler.update()` between: "
        "torch raises (`step() has already been called since the last update()`).",
    example=(
        "for x, y in loader:\n"
        "    scaler.scale(loss).backward()\n"
        "    scaler.step(opt)\n"
        "scaler.update()"
    ),
)
NO_UPDATE = declare(
    "AMP704", SKIP, "rewrite rejected: no `update()` after the last step", _REJECTED,
    why="A path leaves the training step with an optimizer stepped through the scaler and no "
        "`scaler.update()` after it: the scale never adapts, and the next step raises.",
    example=(
        "def step(self):\n"
        "    self.scaler.step(self.opt)  # nothing calls self.scaler.update()"
    ),
)
UNSCALED_TWICE = declare(
    "AMP705", SKIP, "rewrite rejected: `unscale_` twice in one step, or after the step",
    _REJECTED,
    why="`scaler.unscale_(optimizer)` runs twice for one optimizer between two steps, or "
        "after its step and before `update()`: torch raises.",
    example=(
        "scaler.unscale_(opt)\n"
        "scaler.unscale_(opt)  # RuntimeError"
    ),
)
GRADIENTS_READ_SCALED = declare(
    "AMP706", SKIP, "rewrite rejected: scaled gradients read before `unscale_`", _REJECTED,
    why="Code reads or changes `.grad` (clipping, a norm, a clamp) after a scaled backward and "
        "before `scaler.unscale_(optimizer)`: it acts on gradients 65536 times too large.",
    example=(
        "scaler.scale(loss).backward()\n"
        "clip_grad_norm_(model.parameters(), 1.0)  # before unscale_\n"
        "scaler.step(opt)"
    ),
)
BACKWARD_IN_AUTOCAST = declare(
    "AMP707", SKIP, "rewrite rejected: a backward inside autocast", _REJECTED,
    why="A backward pass runs inside an autocast region (the region ends before the backward "
        "in the AMP recipe).",
    example=(
        "with torch.autocast(\"cuda\"):\n"
        "    loss = criterion(model(x), y)\n"
        "    scaler.scale(loss).backward()"
    ),
)
PLAIN_STEP_OF_SCALED = declare(
    "AMP708", SKIP, "rewrite rejected: a plain `step()` applies scaled gradients", _REJECTED,
    why="`optimizer.step()` (not `scaler.step(optimizer)`) applies gradients of a scaled "
        "backward: the update is 65536 times too large, and inf steps are not skipped.",
    example=(
        "scaler.scale(loss).backward()\n"
        "optimizer.step()"
    ),
)
NAME_UNBOUND = declare(
    "AMP709", SKIP, "rewrite rejected: a name the rewrite uses is not bound", _REJECTED,
    why="The rewritten code reads a name that nothing binds in its scope (an import or a "
        "scaler the plan did not create there): it would raise NameError.",
    example=(
        "def train():\n"
        "    scaler.scale(loss).backward()  # no `scaler` in this module"
    ),
)
CODE_CHANGED_ELSEWHERE = declare(
    "AMP710", SKIP, "rewrite rejected: code changed outside the edited statements", _REJECTED,
    why="Outside the statements the plan edits, the rewritten program differs from the input "
        "(compared as Python's AST, as black checks its output).",
    example=(
        "# a plan that edits `loss.backward()` only, and whose output also changed\n"
        "-print(step, loss.item())\n"
        "+print(step)"
    ),
)

REJECTIONS: tuple[Code, ...] = (
    SCALER_MAYBE_NONE, UNSCALED_INTO_SCALED_STEP, STEPPED_TWICE, NO_UPDATE, UNSCALED_TWICE,
    GRADIENTS_READ_SCALED, BACKWARD_IN_AUTOCAST, PLAIN_STEP_OF_SCALED, NAME_UNBOUND,
    CODE_CHANGED_ELSEWHERE,
)


@dataclass(frozen=True)
class Violation:
    """One invariant broken at one site of a program: where (1-based line, 0-based column of
    the site; the qualified name of the function holding it, "" at module level) and why."""

    code: Code
    line: int
    col: int
    scope: str
    message: str
    site: str  # the site's code, which identifies it across two versions of a program
    # the unscaled backwards whose gradients reach the step (AMP702, AMP708), by line, column
    sources: tuple[tuple[int, int], ...] = ()

    @property
    def identity(self) -> tuple[str, str, str]:
        return (self.code.id, self.scope, self.site)
