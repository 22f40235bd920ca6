"""Findings: every change and every site left alone, with a stable code.

The registry below is the single source of truth for codes; `docs/findings.md` lists the same
codes (a test keeps the two in step).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Severity(str, Enum):
    CHANGE = "change"  # the rewrite changed something here
    SKIP = "skip"  # a site the rewrite saw and deliberately left alone
    NOTE = "note"  # information about the whole file
    LINT = "lint"  # an AMP mistake in code that already uses AMP: fails --check
    ERROR = "error"  # the file could not be processed


@dataclass(frozen=True)
class Code:
    """What a finding code means: its severity, a title and advice."""

    severity: Severity
    title: str
    advice: str


CODES: dict[str, Code] = {
    # File-level notes and errors.
    "AMP001": Code(Severity.NOTE, "no training step or model forward pass found",
                   "Nothing to do: the file is left byte-identical."),
    "AMP002": Code(Severity.NOTE, "file already uses mixed precision",
                   "Left unchanged so that running the tool twice changes nothing."),
    "AMP003": Code(Severity.ERROR, "file cannot be parsed",
                   "Fix the syntax error (amprewrite reads Python 3 source) and run again."),
    "AMP004": Code(Severity.ERROR, "file cannot be read or written",
                   "Check the path, its permissions and its encoding."),
    # Changes to the training step.
    "AMP100": Code(Severity.CHANGE, "grad scaler created",
                   "One scaler serves every training step it can reach."),
    "AMP101": Code(Severity.CHANGE, "forward pass and loss wrapped in autocast",
                   "Review that the region covers the forward pass and the loss only."),
    "AMP102": Code(Severity.CHANGE, "backward pass scaled",
                   "The loss is multiplied by the scale before backward."),
    "AMP103": Code(Severity.SKIP, "optimizer step with a closure cannot be loss-scaled",
                   "A grad scaler cannot drive `step(closure)` (LBFGS and friends); the step "
                   "and its closure run in FP32. Move the work out of the closure to use AMP."),
    "AMP104": Code(Severity.CHANGE, "optimizer step routed through the scaler",
                   "`scaler.step(optimizer)` unscales the gradients and skips inf/NaN steps."),
    "AMP105": Code(Severity.CHANGE, "scaler update added",
                   "`scaler.update()` runs once per iteration, after the last optimizer step."),
    "AMP106": Code(Severity.CHANGE, "evaluation forward pass wrapped in autocast",
                   "Inference runs in the low-precision dtype as well."),
    "AMP107": Code(Severity.CHANGE, "autocast inside a forward helper shared with evaluation",
                   "A helper computing the forward pass and loss for training and for other "
                   "callers (evaluation, generator expressions, lambdas) runs them under "
                   "autocast itself, so every use does; its callers are not wrapped again."),
    "AMP108": Code(Severity.CHANGE, "autocast where stored outputs are computed",
                   "A loss built from values another function stored (`select_action` appending "
                   "log-probabilities) gets its region around that function's forward pass, "
                   "not around the arithmetic before the loss."),
    "AMP109": Code(Severity.CHANGE, "low-precision value cast to float32 where it leaves autocast",
                   "Passed to code that runs outside autocast (a function running its own "
                   "backward) or that needs float32 (`torch.distributions` argument checks)."),
    "AMP110": Code(Severity.CHANGE, "gradients unscaled before clipping or reading them",
                   "`scaler.unscale_(optimizer)` runs once per step, before the first code "
                   "between backward and step that clips or reads `.grad`."),
    "AMP111": Code(Severity.CHANGE, "LR scheduler guarded against skipped steps",
                   "A scheduler stepped in the same iteration as the optimizer only steps when "
                   "the scaler did not skip the optimizer step (pytorch issue 55585)."),
    "AMP120": Code(Severity.CHANGE, "scaler state saved in the checkpoint",
                   "Every dict carrying an optimizer's state that reaches `torch.save` or a save "
                   "helper also carries the scaler's."),
    "AMP121": Code(Severity.CHANGE, "scaler state restored from the checkpoint",
                   "Restored only when the checkpoint has it, so checkpoints written before the "
                   "rewrite still load."),
    "AMP112": Code(Severity.CHANGE, "low-precision value cast back to float32 after autocast",
                   "A tensor computed under autocast reaches code that needs float32 "
                   "(`.numpy()`, numpy, a float32 model or matmul, a loss, an index assignment): "
                   "`.float()` is added at that use."),
    "AMP113": Code(Severity.CHANGE, "distribution arguments cast to float32 under autocast",
                   "`torch.distributions` checks its arguments (a simplex within 1e-6) and "
                   "computes log-probabilities in the dtype it is given: under autocast its "
                   "tensor arguments become `.float()`."),
    "AMP134": Code(Severity.CHANGE, "sigmoid input cast to float32 for binary cross-entropy",
                   "A model's forward ends in a sigmoid whose probabilities feed binary "
                   "cross-entropy: its input becomes `.float()`, so probabilities near 1 keep "
                   "their precision instead of rounding to 1.0 in bfloat16/float16."),
    "AMP130": Code(Severity.CHANGE, "binary cross-entropy moved out of autocast",
                   "`nn.BCELoss`/`F.binary_cross_entropy` raise under CUDA autocast; they now run "
                   "after the autocast block on float32 inputs. Prefer `BCEWithLogitsLoss`."),
    "AMP141": Code(Severity.CHANGE, "fill value float16 cannot hold replaced by the dtype's limit",
                   "`x.masked_fill(mask, -1e9)` on a float16 tensor raises under CUDA autocast; "
                   "`torch.finfo(x.dtype).min` is right in every dtype (as transformers does)."),
    "AMP150": Code(Severity.CHANGE, "custom autograd Function decorated for autocast",
                   "`custom_fwd`/`custom_bwd` make backward run with the forward's autocast state "
                   "(float32 inputs where the forward needs them)."),
    "AMP160": Code(Severity.CHANGE, "model initialized for the opt level",
                   "At O2/O3 `scaler.initialize(model, optimizer)` casts the model (batchnorm "
                   "kept FP32 where asked), casts inputs at forward and creates master weights."),
    "AMP161": Code(Severity.CHANGE, "clipping moved to the master weights",
                   "With master weights the optimizer steps FP32 copies; clipping acts on them "
                   "(apex's `amp.master_params(optimizer)`)."),
    "AMP170": Code(Severity.CHANGE, "mixed precision removed (O0)",
                   "O0 on a script amprewrite rewrote takes autocast, the scaler and its "
                   "checkpoint entries out again: plain FP32 training."),
    "AMP401": Code(Severity.CHANGE, "deprecated `torch.cuda.amp` / `torch.cpu.amp` migrated",
                   "Deprecated since torch 2.4: now `torch.amp` with the device type spelled "
                   "out; every argument is kept (autocast's positional ones by keyword)."),
    "AMP402": Code(Severity.SKIP, "apex.amp feature without a native equivalent",
                   "apex.amp is gone (removed from apex in 2025): remove the call; `num_losses` "
                   "is dropped because one native scaler serves every loss."),
    "AMP410": Code(Severity.CHANGE, "apex `amp.initialize` migrated",
                   "A native `GradScaler` keeps the opt level and properties; "
                   "`scaler.initialize(model, optimizer)` casts the model at O2/O3."),
    "AMP411": Code(Severity.CHANGE, "apex `amp.scale_loss` migrated",
                   "`with amp.scale_loss(loss, optimizer) as s: s.backward()` is now "
                   "`scaler.scale(loss).backward()`."),
    "AMP412": Code(Severity.CHANGE, "apex checkpoint state migrated",
                   "`amp.state_dict()` entries are replaced by the scaler's state, saved next to "
                   "the optimizer's; `amp.load_state_dict` by the scaler's restore."),
    "AMP420": Code(Severity.CHANGE, "framework mixed precision switched on",
                   "Accelerate (`mixed_precision`), Lightning `Trainer`/`Fabric` (`precision`) "
                   "own autocast and scaling: their switch is the whole rewrite."),
    "AMP421": Code(Severity.SKIP, "framework already sets its precision",
                   "The `mixed_precision`/`precision` argument is already given: left as is."),
    "AMP422": Code(Severity.NOTE, "framework owns precision elsewhere",
                   "This file uses a framework whose trainer is built in another file: set "
                   "mixed precision there (amprewrite does when it rewrites that file)."),
    "AMP430": Code(Severity.CHANGE, "Ray Train's deprecated AMP helpers migrated",
                   "`train.torch.accelerate(amp=True)`, `prepare_optimizer` and "
                   "`train.torch.backward(loss)` give way to explicit native AMP."),
    "AMP440": Code(Severity.CHANGE, "trainer API given a grad scaler",
                   "Determined: `self.scaler = context.wrap_scaler(GradScaler())`, scaled "
                   "`context.backward`, `step_optimizer(..., scaler=...)`, `update()`. Enchanter: "
                   "`runner.scaler = GradScaler()` (custom runners: in `__init__`)."),
    "AMP441": Code(Severity.SKIP, "trainer class without `__init__`",
                   "The grad scaler must be created once per trainer: add an `__init__`."),
    "AMP501": Code(Severity.CHANGE, "reproducibility enabled at the entry point",
                   "`enable_reproducibility(seed)` seeds random, numpy and torch, and makes cuDNN "
                   "and torch deterministic (see docs/reproducibility.md)."),
    "AMP502": Code(Severity.SKIP, "training DataLoader outside the entry point",
                   "Pass `generator=` and `worker_init_fn=` from `enable_reproducibility`'s result "
                   "to it by hand."),
    "AMP503": Code(Severity.CHANGE, "shuffled DataLoader seeded",
                   "Its shuffling and its workers' seeds now derive from the seed."),
    # Sites left alone.
    "AMP201": Code(Severity.SKIP, "backward without an optimizer step",
                   "Gradients computed for another purpose (saliency, inspection) are left "
                   "unscaled; if this is a training step, make its optimizer step visible."),
    "AMP202": Code(Severity.SKIP, "`.step()` receiver not recognised as an optimizer",
                   "If it is an optimizer, build it with torch.optim (or pass it in from where "
                   "it is built) so the step can be routed through the scaler."),
    "AMP203": Code(Severity.SKIP, "loss computed outside the function that calls backward",
                   "Wrap the forward pass and loss computation in `autocast()` where they run."),
    "AMP204": Code(Severity.SKIP, "backward inside an optimizer closure",
                   "The closure's step cannot be scaled, so its backward stays unscaled."),
    "AMP205": Code(Severity.SKIP, "optimizer step without a backward pass in this file",
                   "The step is left alone: no scaled loss reaches it from this file."),
    "AMP206": Code(Severity.SKIP, "`torch.autograd.backward` call",
                   "Scale the tensors yourself: `torch.autograd.backward(scaler.scale(loss))`."),
    "AMP207": Code(Severity.SKIP, "backward with a positional argument",
                   "`x.backward(arg)` is a framework's backward (`accelerator.backward(loss)`) or "
                   "passes a gradient; use the framework's own mixed-precision switch."),
    "AMP132": Code(Severity.SKIP, "sigmoid output fed to binary cross-entropy",
                   "Probabilities from a sigmoid computed in bfloat16/float16 round to 1.0 and "
                   "the loss jumps; drop the model's final sigmoid and use `BCEWithLogitsLoss`."),
    "AMP133": Code(Severity.SKIP, "low-precision values cannot be cast where they are used",
                   "A container or starred argument carries autocast outputs to a float32 use: "
                   "autocast is left out of the file. Cast with `.float()` where the tensors are "
                   "produced and run again."),
    "AMP140": Code(Severity.SKIP, "manual cast to a low-precision dtype",
                   "apex's rule holds: never cast the model or inputs by hand under AMP; remove "
                   "the cast and let autocast pick the precision per operation."),
    "AMP142": Code(Severity.SKIP, "fill value float16 cannot hold, not rewritten",
                   "The filled tensor is not a plain name (or torch is not imported by name): "
                   "assign it to a name and fill with `torch.finfo(name.dtype).min`."),
    "AMP143": Code(Severity.SKIP, "constant outside float16's range in low-precision code",
                   "An epsilon below 6.1e-5 vanishes and a bound or factor above 65504 raises or "
                   "overflows on a float16 tensor: compute it after `.float()` or pick a value "
                   "float16 holds."),
    "AMP144": Code(Severity.SKIP, "autocast that covers evaluation only, kept",
                   "The file trained in FP32 (its autocast runs without gradients only): the "
                   "training step is rewritten and this region is kept as written."),
    "AMP145": Code(Severity.SKIP, "apex.amp imported but never called",
                   "apex (SyncBatchNorm, fused optimizers) does not make a script mixed "
                   "precision: it is rewritten; remove the unused `amp` import."),
    "AMP146": Code(Severity.SKIP, "Gram matrix under autocast may overflow float16",
                   "A tensor multiplied by its own transpose sums squares (`torch.mm(f, f.t())`, "
                   "a style loss): float16 overflows to inf and every step is skipped. Compute "
                   "it in float32 under `autocast(enabled=False)`; bfloat16 is safe."),
    "AMP260": Code(Severity.SKIP, "model not initialized for O2/O3",
                   "The optimizer's model is unknown or already wrapped by DDP/FSDP: call "
                   "`scaler.initialize(model, optimizer)` by hand, before any wrapping."),
    "AMP208": Code(Severity.SKIP, "`torch.autograd.grad` in a training step",
                   "Left unscaled: results stay correct, but float16 gradients may underflow. "
                   "Scale the outputs and unscale the gradients as in the AMP recipe."),
    "AMP210": Code(Severity.SKIP, "scaler protocol cannot be kept on every path",
                   "Between two `scaler.update()`s an optimizer may be unscaled once and "
                   "stepped once, and every path that unscaled or stepped must reach one "
                   "`update()`. Restructure the loop so that one statement ends every step "
                   "path (e.g. keep retries around forward and backward only)."),
    "AMP211": Code(Severity.SKIP, "scaled gradients read without an optimizer to unscale them",
                   "A path reads or applies `.grad` after a scaled backward and no optimizer "
                   "step of that path can unscale them (a manual SGD update): use a "
                   "torch.optim optimizer on every path, or keep this step in FP32."),
    "AMP212": Code(Severity.SKIP, "optimizer bound only on some paths",
                   "The stepped optimizer is created inside a branch; the scaler calls would "
                   "name it where it may not exist. Create it on every path."),
    "AMP220": Code(Severity.SKIP, "function running its own backward kept out of autocast",
                   "An attack (FGSM/PGD), gradient penalty or meta-learning inner loop calls "
                   "`.backward()` or `torch.autograd.grad` itself: the region is cut around the "
                   "call, which runs in float32 with unscaled gradients."),
    # AMP mistakes in code that already uses AMP (fixed by a normal run where marked).
    "AMP601": Code(Severity.LINT, "optimizer step bypasses the grad scaler",
                   "Fixed: `scaler.step(optimizer)`, so inf/NaN steps are skipped and gradients "
                   "are unscaled."),
    "AMP602": Code(Severity.LINT, "`scaler.step` without `scaler.update`",
                   "Fixed: `scaler.update()` after the last step, or the scale never adapts."),
    "AMP603": Code(Severity.LINT, "clipping without `unscale_`",
                   "Fixed: `scaler.unscale_(optimizer)` before clipping, which otherwise acts on "
                   "scaled gradients."),
    "AMP604": Code(Severity.LINT, "backward inside autocast",
                   "Move `.backward()` after the `with autocast():` block (the AMP recipe)."),
    "AMP605": Code(Severity.LINT, "checkpoint without the scaler's state",
                   "Fixed: the scaler's `state_dict()` is saved next to the optimizer's."),
    "AMP607": Code(Severity.LINT, "binary cross-entropy inside autocast",
                   "It raises on CUDA: use `BCEWithLogitsLoss`, or compute it outside the region "
                   "on float32 inputs."),
    "AMP608": Code(Severity.LINT, "manual half-precision cast next to a grad scaler",
                   "GradScaler cannot unscale float16 gradients: remove the cast."),
    "AMP609": Code(Severity.LINT, "unscaled backward in a script that scales",
                   "Fixed: `scaler.scale(loss).backward()` (a backward added after the rewrite)."),
}


@dataclass(frozen=True)
class Finding:
    """One reported site: `path:line:col: code message`."""

    code: str
    line: int
    col: int
    message: str

    @property
    def severity(self) -> Severity:
        return CODES[self.code].severity

    def format(self, path: str) -> str:
        return f"{path}:{self.line}:{self.col}: {self.code} {self.message}"
