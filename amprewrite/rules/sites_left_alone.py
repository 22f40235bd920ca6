"""Report what the analysis saw and leaves alone: training sites it cannot pair or scale,
and risky code (manual casts, unscaled `torch.autograd.grad`, Gram matrices, ...)."""

from __future__ import annotations

from amprewrite.analysis import ModuleAnalysis
from amprewrite.analysis.apex_amp import APEX_IMPORT_UNUSED
from amprewrite.analysis.ema_buffers import BUFFER_PRODUCT
from amprewrite.analysis.existing_amp import EVALUATION_ONLY_AUTOCAST, OPTIONAL_APEX_KEPT
from amprewrite.analysis.fp32_forwards import FORWARD_LEFT_FP32
from amprewrite.analysis.gram_matrices import GRAM_MATRIX
from amprewrite.analysis.hazards import AUTOGRAD_GRAD, MANUAL_CAST
from amprewrite.analysis.kept_gradients import GRADIENTS_KEPT_ACROSS_STEPS
from amprewrite.analysis.scaler_protocol import GRADIENTS_WITHOUT_OPTIMIZER, PROTOCOL_NOT_KEPT
from amprewrite.analysis.stored_forwards import FORWARD_RUNS_ELSEWHERE
from amprewrite.analysis.training_step import (
    AUTOGRAD_BACKWARD,
    BACKWARD_IN_CLOSURE,
    BACKWARD_OF_NON_TENSOR,
    BACKWARD_WITH_ARGUMENT,
    BACKWARD_WITHOUT_STEP,
    CLOSURE_STEP,
    GRADIENTS_USED_OUT_OF_REACH,
    LOSS_COMPUTED_ELSEWHERE,
    OPAQUE_CALL_ON_SCALED_GRADIENTS,
    OPTIMIZER_BOUND_ON_SOME_PATHS,
    STEP_WITHOUT_BACKWARD,
    TWO_STEP_OPTIMIZER,
    UNKNOWN_STEP_RECEIVER,
)
from amprewrite.analysis.unguarded_forwards import FORWARD_WITHOUT_NO_GRAD
from amprewrite.rules.context import RuleContext
from amprewrite.rules.registry import Example, rule

# The codes of the training step's sites left alone (`analysis.training.notes`).
TRAINING_SITES = (
    CLOSURE_STEP, BACKWARD_WITHOUT_STEP, UNKNOWN_STEP_RECEIVER, LOSS_COMPUTED_ELSEWHERE,
    BACKWARD_IN_CLOSURE, STEP_WITHOUT_BACKWARD, AUTOGRAD_BACKWARD, BACKWARD_WITH_ARGUMENT,
    OPTIMIZER_BOUND_ON_SOME_PATHS, OPAQUE_CALL_ON_SCALED_GRADIENTS, PROTOCOL_NOT_KEPT,
    GRADIENTS_WITHOUT_OPTIMIZER, BACKWARD_OF_NON_TENSOR, TWO_STEP_OPTIMIZER,
    GRADIENTS_USED_OUT_OF_REACH, GRADIENTS_KEPT_ACROSS_STEPS,
)

def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    produced = analysis.function_regions.produced  # autocast where the loss is computed
    notes = [note for note in analysis.training.notes
             if not (note.code is LOSS_COMPUTED_ELSEWHERE and id(note.node) in produced)]
    ctx.notes.extend([*notes, *analysis.hazards])


_SITES_LEFT_ALONE_EXAMPLES = (
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.LBFGS(model.parameters())
x, y = torch.randn(8, 4), torch.randn(8, 2)


def closure():
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


optimizer.step(closure)
""",
        after=None,
        codes=(CLOSURE_STEP, BACKWARD_IN_CLOSURE),
    ),
    Example(
        before="""\
import torch
from utils import average_gradients

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for i, (x, y) in enumerate(loader):
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    average_gradients(model)
    if (i + 1) % 4 == 0:
        optimizer.step()
        optimizer.zero_grad()
""",
        after="""\
import torch
from amprewrite_runtime import GradScaler, autocast
from utils import average_gradients

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = GradScaler()
for i, (x, y) in enumerate(loader):
    with autocast():
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    average_gradients(model)
    if (i + 1) % 4 == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
        codes=(OPAQUE_CALL_ON_SCALED_GRADIENTS,),
    ),
    Example(
        before="""\
import torch
from sam import SAM

model = torch.nn.Linear(4, 2)
optimizer = SAM(model.parameters(), torch.optim.SGD, lr=0.1)
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.first_step(zero_grad=True)
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.second_step(zero_grad=True)
""",
        after=None,
        codes=(TWO_STEP_OPTIMIZER,),
    ),
    Example(
        before="""\
import torch
from learner import Learner


class MyLearner(Learner):
    def one_batch(self, x, y):
        self.loss = self.loss_func(self.model(x), y)
        self.backward()
        self.opt.step()
""",
        after=None,
        codes=(BACKWARD_OF_NON_TENSOR, STEP_WITHOUT_BACKWARD),
    ),
    Example(
        before="""\
import torch

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def forward_backward(batch):
    for x, y in batch:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)


for batch in loader:
    forward_backward(batch)
    optimizer.step()
    optimizer.zero_grad()
""",
        after=None,
        codes=(GRADIENTS_USED_OUT_OF_REACH,),
    ),
)


RULE = rule(
    "sites-left-alone",
    (*TRAINING_SITES, MANUAL_CAST, AUTOGRAD_GRAD, EVALUATION_ONLY_AUTOCAST, OPTIONAL_APEX_KEPT,
     APEX_IMPORT_UNUSED, GRAM_MATRIX, FORWARD_LEFT_FP32, BUFFER_PRODUCT, FORWARD_WITHOUT_NO_GRAD,
     FORWARD_RUNS_ELSEWHERE),
    _plan,
    examples=_SITES_LEFT_ALONE_EXAMPLES,
)
