"""FP32 training programs generated from parts, for the generated-program tests
(tests/test_generated_programs.py).

A `Program` is one choice per dimension of what real training code varies: where the loop
lives (`HOMES`), where the models and optimizers live (`HOLDERS`), what one iteration does
(`STEPS`: one loss, two losses, a GAN, a WGAN critic with seeded backwards, lazy
regularisation, an adversarial input built with `torch.autograd.grad`, an input-gradient
penalty), how the backward is spelled (`BACKWARDS`), accumulation, clipping (`CLIPS`),
checkpoints (`CHECKPOINTS`), how gradients are zeroed (`ZEROS`), backward and step helpers
(`HELPERS`) and, for the lint path, the author's own AMP (`AMPS`: flag-gated, None-guarded,
`enabled=`). `programs()` draws them, each dimension its own strategy whose first value is
the plainest (a `Program`'s defaults), so that hypothesis shrinks a failure to a readable
program.

Every program is valid Python that trains tiny `nn.Linear` models on seeded synthetic data
for `ITERATIONS` steps on the CPU, in FP32 (the author's AMP is off: `USE_AMP = False`), in
well under a second; `Program.source` is its text, `Program.cells` its notebook cells where
it is one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# The profile every generated-program test runs under: derandomized, so CI is deterministic
# (a test's examples follow from its name), and no deadline (rewrites of the first examples
# pay for imports and caches).
PROFILE = settings(deadline=None, derandomize=True, database=None, print_blob=False,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

ITERATIONS = 24  # of the loop over DATA (with accumulation: 12 optimizer steps)

HOMES = ("module", "function", "method", "closure", "callback", "notebook")
# Where the models and optimizers live, for each home: bare names (module globals, a closure's
# locals, attributes of `self` in a method), a dict, a list, an attribute-access container
# (`SimpleNamespace`), the loop function's parameters or keyword-only parameters.
HOLDERS = {
    "module": ("names", "dict", "list", "namespace"),
    "function": ("names", "parameter", "keyword", "dict", "list", "namespace"),
    "method": ("names", "dict", "list", "namespace"),
    "closure": ("names", "dict", "list", "namespace"),
    "callback": ("names", "dict", "list", "namespace"),
    "notebook": ("names", "dict", "list", "namespace"),
}
STEPS = ("single", "two_losses", "gan", "wgan", "lazy", "attack", "penalty")
BACKWARDS = ("method", "seeded", "autograd", "autograd_list")  # how a single loss goes back
CLIPS = ("none", "direct", "helper")
CHECKPOINTS = ("none", "inline", "helper", "kwargs", "comprehension")
AMPS = ("fp32", "flag", "none_guarded", "enabled")  # the author's AMP (lint path)
# How gradients are zeroed: the optimizer's `zero_grad()`, `zero_grad(set_to_none=True)`, the
# model's, or each parameter's `.grad = None`.
ZEROS = ("optimizer", "set_to_none", "model", "grads_none")
# The backward pass, the optimizer step, or both, in module-level helpers (FP32 programs).
HELPERS = ("none", "backward", "step", "both")
# Steps whose backward pass the author's AMP can scale as written (the lint path).
AMP_STEPS = ("single", "two_losses", "gan", "lazy")


@dataclass(frozen=True)
class Program:
    """One choice per dimension (see the module docstring); the defaults are the plainest."""

    home: str = "module"
    holder: str = "names"
    step: str = "single"
    backward: str = "method"
    accumulate: bool = False
    clip: str = "none"
    checkpoint: str = "none"
    amp: str = "fp32"
    zero: str = "optimizer"
    helpers: str = "none"

    @property
    def source(self) -> str:
        return "".join(self.cells)

    @property
    def cells(self) -> list[str]:
        """The program's parts; a notebook's code cells (each ends with a newline)."""
        return _Writer(self).parts()

    def __str__(self) -> str:
        return " ".join(f"{k}={v}" for k, v in vars(self).items()
                        if v != getattr(Program, k))


@st.composite
def programs(draw: st.DrawFn, amp: Sequence[str] = ("fp32",),
             homes: Sequence[str] = HOMES) -> Program:
    """A program of the given homes, with the author's AMP drawn from `amp`."""
    home = draw(st.sampled_from(homes))
    holder = draw(st.sampled_from(HOLDERS[home]))
    chosen_amp = draw(st.sampled_from(amp))
    step = draw(st.sampled_from(STEPS if chosen_amp == "fp32" else AMP_STEPS))
    single = step in ("single", "lazy", "attack")
    backward = draw(st.sampled_from(BACKWARDS)) if single and chosen_amp == "fp32" else "method"
    accumulate = draw(st.booleans()) if step in ("single", "two_losses", "attack") else False
    clip, checkpoint = draw(st.sampled_from(CLIPS)), draw(st.sampled_from(CHECKPOINTS))
    zero = draw(st.sampled_from(ZEROS))
    helpers = draw(st.sampled_from(HELPERS)) if chosen_amp == "fp32" else "none"
    return Program(home, holder, step, backward, accumulate, clip, checkpoint, chosen_amp, zero,
                   helpers)


# --- one iteration, as a few kinds of operation rendered FP32 or with the author's AMP ---

@dataclass(frozen=True)
class Zero:
    opt: str
    model: str
    how: str  # ZEROS


@dataclass(frozen=True)
class Forward:
    lines: tuple[str, ...]  # compute the losses (under autocast in the author's AMP)


@dataclass(frozen=True)
class Line:
    text: str  # anything else, the same in FP32 and in AMP


@dataclass(frozen=True)
class Backward:
    loss: str
    form: str = "method"  # BACKWARDS, or "retain" (`retain_graph=True`), or a seed's name
    helper: bool = False  # through `backward(loss)`


@dataclass(frozen=True)
class Clip:
    model: str
    opt: str
    helper: bool


@dataclass(frozen=True)
class Step:
    opt: str
    helper: bool = False  # through `optimizer_step(opt)`


@dataclass(frozen=True)
class Guard:
    test: str
    body: tuple[Op, ...]


Op = Zero | Forward | Line | Backward | Clip | Step | Guard

_MODELS = {"main": "model", "g": "generator", "d": "critic"}  # by role
_OPTIMIZERS = {"main": "optimizer", "g": "opt_g", "d": "opt_d"}


class _Writer:
    """Renders one program: its header (imports, data, constants, helpers), its setup
    (models, optimizers, the author's scaler), the loop in its home, and what follows it."""

    def __init__(self, program: Program) -> None:
        self.p = program
        self.self_ = "self." if program.home == "method" else ""

    # -- names --

    def model(self, role: str) -> str:
        return self.self_ + _MODELS[role]

    def roles(self) -> tuple[str, ...]:
        return ("d", "g") if self.p.step in ("gan", "wgan") else ("main",)

    def opt(self, role: str) -> str:
        holder = self.p.holder
        if holder in ("names", "parameter", "keyword"):
            return self.self_ + _OPTIMIZERS[role]
        container = self.self_ + "optimizers"
        if holder == "dict":
            return f'{container}["{role}"]'
        if holder == "list":
            return f"{container}[{self.roles().index(role)}]"
        return f"{container}.{role}"

    @property
    def scaler(self) -> str:
        return self.self_ + "scaler"

    # -- the parts of the program --

    def parts(self) -> list[str]:
        header, setup, loop, after = self.header(), self.setup(), self.loop(), self.after()
        if self.p.home == "notebook":
            return [cell for cell in (header, setup, loop, after) if cell]
        return ["\n\n".join(part for part in (header, setup, loop, after) if part)]

    def header(self) -> str:
        lines = ["import os", "import tempfile"] if self.p.checkpoint != "none" else []
        if self.p.holder == "namespace":
            lines.append("from types import SimpleNamespace")
        if lines:
            lines.append("")
        lines += ["import torch", "import torch.nn as nn", "import torch.nn.functional as F",
                  "", "torch.manual_seed(0)", "W = torch.randn(4, 1)",
                  f"DATA = [(x, x @ W) for x in torch.randn({ITERATIONS}, 8, 4)]"]
        if self.p.checkpoint != "none":
            lines.append('CKPT = os.path.join(tempfile.mkdtemp(), "checkpoint.pt")')
        if self.p.accumulate:
            lines.append("ACCUM = 2")
        if self.p.step == "lazy":
            lines.append("LAZY = 4")
        if self.p.step == "wgan":
            lines += ["ONE = torch.tensor(1.0)", "MONE = -ONE"]
        if self.p.amp != "fp32":
            lines.append("USE_AMP = False")
        text = "\n".join(lines) + "\n"
        helpers = [*self.step_helpers(), *self.clip_helper(), *self.checkpoint_helpers()]
        return text + "".join("\n\n" + helper for helper in helpers)

    def step_helpers(self) -> list[str]:
        """The helpers the step calls (a backward helper only where a backward is plain)."""
        used = {type(op) for op in _flat(self.ops()) if getattr(op, "helper", False)}
        return [*(["def backward(loss):\n    loss.backward()\n"] if Backward in used else []),
                *(["def optimizer_step(optimizer):\n    optimizer.step()\n"]
                  if Step in used else [])]

    def clip_helper(self) -> list[str]:
        if self.p.clip != "helper":
            return []
        return ["def clip_gradients(model):\n"
                "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"]

    def checkpoint_helpers(self) -> list[str]:
        kind = self.p.checkpoint
        if kind == "helper":
            params = ", ".join(self.checkpoint_names())
            save = ", ".join(f'"{n}": {n}.state_dict()' for n in self.checkpoint_names())
            load = "".join(f'    {n}.load_state_dict(checkpoint["{n}"])\n'
                           for n in self.checkpoint_names())
            return [f"def save_checkpoint(path, {params}):\n    torch.save({{{save}}}, path)\n",
                    f"def load_checkpoint(path, {params}):\n"
                    f"    checkpoint = torch.load(path)\n{load}"]
        if kind == "kwargs":
            return ["def save_checkpoint(path, **objects):\n"
                    "    torch.save({name: obj.state_dict() for name, obj in objects.items()}, "
                    "path)\n",
                    "def load_checkpoint(path, **objects):\n"
                    "    checkpoint = torch.load(path)\n"
                    "    for name, obj in objects.items():\n"
                    "        obj.load_state_dict(checkpoint[name])\n"]
        return []

    def checkpoint_names(self) -> list[str]:
        """The checkpoint's keys: each model and optimizer by its plain name."""
        roles = self.roles()
        return [*(_MODELS[r] for r in roles), *(_OPTIMIZERS[r] for r in roles)]

    def checkpoint_objects(self) -> list[str]:
        return [*(self.model(r) for r in self.roles()), *(self.opt(r) for r in self.roles())]

    def setup(self) -> str:
        """Models, optimizers (and the author's scaler) at module level; a method's are in
        `__init__` and a closure's in `main()` (see `loop`)."""
        if self.p.home in ("closure", "method"):
            return ""
        return _lines(self.setup_lines())

    def setup_lines(self) -> list[str]:
        lines = []
        for role in self.roles():
            shape = "nn.Linear(4, 4)" if role == "g" else "nn.Linear(4, 1)"
            lines.append(f"{self.model(role)} = {shape}")
        built = {role: f"torch.optim.SGD({self.model(role)}.parameters(), lr=0.05)"
                 for role in self.roles()}
        holder = self.p.holder
        container = self.self_ + "optimizers"
        if holder in ("names", "parameter", "keyword"):
            lines += [f"{self.opt(role)} = {built[role]}" for role in self.roles()]
        elif holder == "dict":
            items = ", ".join(f'"{role}": {built[role]}' for role in self.roles())
            lines.append(f"{container} = {{{items}}}")
        elif holder == "list":
            lines.append(f"{container} = [{', '.join(built.values())}]")
        else:
            items = ", ".join(f"{role}={built[role]}" for role in self.roles())
            lines.append(f"{container} = SimpleNamespace({items})")
        return lines + self.scaler_setup()

    def scaler_setup(self) -> list[str]:
        amp, scaler = self.p.amp, self.scaler
        if amp == "flag":
            return ["if USE_AMP:", f'    {scaler} = torch.amp.GradScaler("cpu")']
        if amp == "none_guarded":
            return [f"{scaler} = None", "if USE_AMP:",
                    f'    {scaler} = torch.amp.GradScaler("cpu")']
        if amp == "enabled":
            return [f'{scaler} = torch.amp.GradScaler("cpu", enabled=USE_AMP)']
        return []

    # -- the loop in its home --

    def loop(self) -> str:
        home = self.p.home
        step = self.step_lines()
        loop = ["for i, (x, y) in enumerate(DATA):", *_indent(step)]
        after = self.checkpoint_lines()
        if home in ("module", "notebook"):
            return _lines(loop)
        if home == "function":
            params, args = self.parameters()
            loop[0] = loop[0].replace("DATA", "data")
            return (_lines([f"def train(data{params}):", *_indent([*loop, *after])])
                    + "\n\n" + f"train(DATA{args})\n")
        if home == "callback":
            return (_lines(["def on_batch(i, x, y):", *_indent(step)]) + "\n\n"
                    + _lines(["def fit(data, callback):",
                              "    for i, (x, y) in enumerate(data):",
                              "        callback(i, x, y)"])
                    + "\n\nfit(DATA, on_batch)\n")
        if home == "closure":
            body = [*self.setup_lines(), "", "def train_step(i, x, y):", *_indent(step), "",
                    "for i, (x, y) in enumerate(DATA):", "    train_step(i, x, y)", *after]
            return _lines(["def main():", *_indent(body)]) + "\n\nmain()\n"
        loop[0] = loop[0].replace("DATA", "data")
        return (_lines(["class Trainer:", "    def __init__(self):",
                        *_indent(self.setup_lines(), 2), "",
                        "    def fit(self, data):", *_indent([*loop, *after], 2)])
                + "\n\nTrainer().fit(DATA)\n")

    def parameters(self) -> tuple[str, str]:
        """The loop function's parameters past `data`, and the call's arguments."""
        if self.p.holder not in ("parameter", "keyword"):
            return "", ""
        names = [*(self.model(r) for r in self.roles()), *(self.opt(r) for r in self.roles())]
        if self.p.amp in ("none_guarded", "enabled"):  # a flag-gated one may be unbound
            names.append(self.scaler)
        if self.p.holder == "parameter":
            return "".join(f", {n}" for n in names), "".join(f", {n}" for n in names)
        return ", *, " + ", ".join(names), "".join(f", {n}={n}" for n in names)

    def after(self) -> str:
        """What follows the loop at module level: the checkpoint of a module-level or
        callback loop (the other homes keep it in the loop's function)."""
        if self.p.home not in ("module", "notebook", "callback"):
            return ""
        return _lines(self.checkpoint_lines())

    def checkpoint_lines(self) -> list[str]:
        kind = self.p.checkpoint
        names, objects = self.checkpoint_names(), self.checkpoint_objects()
        pairs = list(zip(names, objects, strict=True))
        if kind == "inline":
            save = ", ".join(f'"{n}": {o}.state_dict()' for n, o in pairs)
            return [f"torch.save({{{save}}}, CKPT)", "checkpoint = torch.load(CKPT)",
                    *(f'{o}.load_state_dict(checkpoint["{n}"])' for n, o in pairs)]
        if kind == "helper":
            args = ", ".join(objects)
            return [f"save_checkpoint(CKPT, {args})", f"load_checkpoint(CKPT, {args})"]
        if kind == "kwargs":
            args = ", ".join(f"{n}={o}" for n, o in pairs)
            return [f"save_checkpoint(CKPT, {args})", f"load_checkpoint(CKPT, {args})"]
        if kind == "comprehension":
            items = ", ".join(f'"{n}": {o}' for n, o in pairs)
            return [f"objects = {{{items}}}",
                    "torch.save({name: obj.state_dict() for name, obj in objects.items()}, "
                    "CKPT)",
                    "checkpoint = torch.load(CKPT)",
                    "for name, obj in objects.items():",
                    "    obj.load_state_dict(checkpoint[name])"]
        return []

    # -- one iteration --

    def step_lines(self) -> list[str]:
        ops = self.ops()
        amp = self.p.amp
        if amp == "fp32":
            return _render(ops, None)
        if amp == "flag":
            return ["if USE_AMP:", *_indent(_render(ops, self.scaler)), "else:",
                    *_indent(_render(ops, None))]
        if amp == "none_guarded":
            return [f"if {self.scaler} is None:", *_indent(_render(ops, None)), "else:",
                    *_indent(_render(ops, self.scaler))]
        return _render(ops, self.scaler, enabled="USE_AMP")

    def ops(self) -> list[Op]:
        kind = self.p.step
        if kind in ("gan", "wgan"):
            return self.adversarial(kind == "wgan")
        main, opt = self.model("main"), self.opt("main")
        divide = " / ACCUM" if self.p.accumulate else ""
        data = "x"
        ops: list[Op] = []
        if kind == "attack":
            ops.append(Line("x_adv = x.clone().requires_grad_(True)"))
            ops.append(Line(f"attack_loss = F.mse_loss({main}(x_adv), y)"))
            ops.append(Line("(grad,) = torch.autograd.grad(attack_loss, x_adv)"))
            ops.append(Line("x_adv = (x + 0.01 * grad.sign()).detach()"))
            data = "x_adv"
        if not self.p.accumulate:
            ops.append(self.zero("main"))
        if kind == "penalty":
            ops.append(Line("x_in = x.clone().requires_grad_(True)"))
            ops.append(Forward((f"out = {main}(x_in)",
                                "(grad,) = torch.autograd.grad(out.sum(), x_in, "
                                "create_graph=True)",
                                f"loss = F.mse_loss(out, y) + 0.1 * grad.pow(2).mean(){divide}")))
        else:
            ops.append(Forward((f"out = {main}({data})", f"loss = F.mse_loss(out, y){divide}")))
        if kind == "two_losses":
            ops.append(Forward((f"aux = 0.01 * out.abs().mean(){divide}",)))
            ops += [Backward("loss", "retain"), self.back("aux")]
        else:
            ops.append(self.back("loss", self.p.backward))
        update: list[Op] = [*self.clip(main, opt), self.stepped(opt)]
        if self.p.accumulate:
            ops.append(Guard("(i + 1) % ACCUM == 0", (*update, self.zero("main"))))
        else:
            ops += update
        if kind == "lazy":
            ops.append(Guard("i % LAZY == 0", (
                self.zero("main"), Forward((f"penalty = 0.01 * {main}(x).pow(2).mean()",)),
                self.back("penalty", self.p.backward), self.stepped(opt))))
        return ops

    def zero(self, role: str) -> Zero:
        return Zero(self.opt(role), self.model(role), self.p.zero)

    def back(self, loss: str, form: str = "method") -> Backward:
        return Backward(loss, form, form == "method" and self.p.helpers in ("backward", "both"))

    def stepped(self, opt: str) -> Step:
        return Step(opt, self.p.helpers in ("step", "both"))

    def clip(self, model: str, opt: str) -> list[Op]:
        return [] if self.p.clip == "none" else [Clip(model, opt, self.p.clip == "helper")]

    def adversarial(self, wgan: bool) -> list[Op]:
        g, d = self.model("g"), self.model("d")
        opt_g, opt_d = self.opt("g"), self.opt("d")
        ops: list[Op] = [self.zero("d")]
        if wgan:
            ops += [Forward((f"fake = {g}(torch.randn(8, 4))", f"d_real = {d}(x).mean()",
                             f"d_fake = {d}(fake.detach()).mean()")),
                    Backward("d_real", "MONE"), Backward("d_fake", "ONE")]
        else:
            ops += [Forward((f"fake = {g}(torch.randn(8, 4))",
                             f"d_loss = F.softplus({d}(fake.detach())).mean() + "
                             f"F.softplus(-{d}(x)).mean()")),
                    self.back("d_loss")]
        ops += [*self.clip(d, opt_d), self.stepped(opt_d)]
        if wgan:
            ops.append(Line(f"for p in {d}.parameters():\n    p.data.clamp_(-0.5, 0.5)"))
        ops += [self.zero("g"),
                Forward((f"g_loss = -{d}(fake).mean()" if wgan
                         else f"g_loss = F.softplus(-{d}(fake)).mean()",)),
                self.back("g_loss"), self.stepped(opt_g)]
        return ops


def _render(ops: Iterable[Op], scaler: str | None, enabled: str | None = None) -> list[str]:
    """The ops as FP32 code (`scaler` None) or with the author's AMP through `scaler`."""
    out: list[str] = []
    for op in ops:
        if isinstance(op, Zero):
            out += _zero(op)
        elif isinstance(op, Line):
            out += op.text.splitlines()
        elif isinstance(op, Forward):
            if scaler is None:
                out += op.lines
            else:
                on = f", enabled={enabled}" if enabled else ""
                out += [f'with torch.autocast("cpu", dtype=torch.bfloat16{on}):',
                        *_indent(list(op.lines))]
        elif isinstance(op, Backward):
            loss = op.loss if scaler is None else f"{scaler}.scale({op.loss})"
            out.append(f"backward({loss})" if op.helper else _backward(loss, op.form))
        elif isinstance(op, Clip):
            if scaler is not None:
                out.append(f"{scaler}.unscale_({op.opt})")
            out.append(f"clip_gradients({op.model})" if op.helper else
                       f"torch.nn.utils.clip_grad_norm_({op.model}.parameters(), 1.0)")
        elif isinstance(op, Step):
            if scaler is None:
                out.append(f"optimizer_step({op.opt})" if op.helper else f"{op.opt}.step()")
            else:
                out += [f"{scaler}.step({op.opt})", f"{scaler}.update()"]
        else:
            out += [f"if {op.test}:", *_indent(_render(op.body, scaler, enabled))]
    return out


def _flat(ops: Iterable[Op]) -> Iterable[Op]:
    for op in ops:
        yield op
        if isinstance(op, Guard):
            yield from _flat(op.body)


def _zero(op: Zero) -> list[str]:
    if op.how == "optimizer":
        return [f"{op.opt}.zero_grad()"]
    if op.how == "set_to_none":
        return [f"{op.opt}.zero_grad(set_to_none=True)"]
    if op.how == "model":
        return [f"{op.model}.zero_grad()"]
    return [f"for p in {op.model}.parameters():", "    p.grad = None"]


def _backward(loss: str, form: str) -> str:
    if form == "method":
        return f"{loss}.backward()"
    if form == "retain":
        return f"{loss}.backward(retain_graph=True)"
    if form == "seeded":
        return f"{loss}.backward(torch.ones_like({loss}))"
    if form == "autograd":
        return f"torch.autograd.backward({loss})"
    if form == "autograd_list":
        return f"torch.autograd.backward([{loss}])"
    return f"{loss}.backward({form})"  # a seed's name


def _indent(lines: list[str], levels: int = 1) -> list[str]:
    pad = "    " * levels
    return [pad + line if line else line for line in lines]


def _lines(lines: list[str]) -> str:
    return "\n".join(lines) + "\n" if lines else ""
