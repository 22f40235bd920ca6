"""A module that only defines models (no training step) still gets the fills float16 cannot
hold fitted to the tensor's dtype, and the values its forwards assign to a parameter's `.data`
cast to the parameter's dtype, since whichever script trains it may run it in float16 (both
edits are right in every dtype); it reports the buffers its forward updates that float16 would
overflow."""

from __future__ import annotations

from typing import TYPE_CHECKING

from amprewrite.analysis.ema_buffers import BUFFER_PRODUCT
from amprewrite.analysis.escapes import Escapes
from amprewrite.analysis.float16_constants import FILL_NOT_FITTED
from amprewrite.rules.context import RuleContext
from amprewrite.rules.escapes import CAST_AFTER_AUTOCAST, cast_escapes
from amprewrite.rules.float16_constants import FILL_FITTED, fit_fills_to_dtype
from amprewrite.rules.registry import Example, rule
from amprewrite.rules.sites_left_alone import TRAINING_SITES

if TYPE_CHECKING:
    from amprewrite.analysis import ModuleAnalysis


def _plan(ctx: RuleContext, analysis: ModuleAnalysis) -> None:
    fit_fills_to_dtype(ctx, analysis.model_fills)
    cast_escapes(ctx, Escapes(casts=analysis.model_data_inits))
    ctx.notes.extend([*analysis.training.notes, *analysis.buffer_products])


_MODEL_MODULE_CONSTANTS_EXAMPLES = (
    Example(
        before="""\
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qk = nn.Linear(dim, 2 * dim)

    def forward(self, x, mask):
        q, k = self.qk(x).chunk(2, dim=-1)
        scores = q @ k.transpose(-2, -1)
        scores = scores.masked_fill(mask == 0, -1e9)
        return scores.softmax(dim=-1)
""",
        after="""\
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qk = nn.Linear(dim, 2 * dim)

    def forward(self, x, mask):
        q, k = self.qk(x).chunk(2, dim=-1)
        scores = q @ k.transpose(-2, -1)
        scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
        return scores.softmax(dim=-1)
""",
        codes=(FILL_FITTED,),
    ),
    Example(
        before="""\
import torch
from torch import nn


class ActNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.log_scale = nn.Parameter(torch.zeros(1, dim))
        self.initialised = False

    def forward(self, x):
        if not self.initialised:
            self.log_scale.data = -torch.log(x.std(dim=0, keepdim=True))
            self.initialised = True
        return x * torch.exp(self.log_scale)
""",
        after="""\
import torch
from torch import nn


class ActNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.log_scale = nn.Parameter(torch.zeros(1, dim))
        self.initialised = False

    def forward(self, x):
        if not self.initialised:
            self.log_scale.data = (-torch.log(x.std(dim=0, keepdim=True))).to(
                self.log_scale.dtype
            )
            self.initialised = True
        return x * torch.exp(self.log_scale)
""",
        codes=(CAST_AFTER_AUTOCAST,),
    ),
    Example(
        before="""\
import torch
from torch import nn


class Quantize(nn.Module):
    def __init__(self, dim, n_embed):
        super().__init__()
        self.register_buffer("embed", torch.randn(dim, n_embed))
        self.register_buffer("embed_avg", torch.randn(dim, n_embed))

    def forward(self, flatten):
        dist = -2 * flatten @ self.embed
        index = dist.argmin(1)
        self.embed.data.copy_(self.embed_avg / 2)
        return index
""",
        after=None,
        codes=(BUFFER_PRODUCT,),
    ),
)


RULE = rule("model-module-constants", (), _plan, examples=_MODEL_MODULE_CONSTANTS_EXAMPLES,
            reports=(FILL_FITTED, FILL_NOT_FITTED, BUFFER_PRODUCT, CAST_AFTER_AUTOCAST,
                     *TRAINING_SITES))
