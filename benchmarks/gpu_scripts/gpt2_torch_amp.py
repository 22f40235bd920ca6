"""A GPT-2-small-sized transformer language model (12 layers, 12 heads, d_model 768, context
1024, vocabulary 50304 (GPT-2's padded to a multiple of 64), tied embeddings: 124M
parameters; nanoGPT's layout, attention through scaled_dot_product_attention) trained on
random token sequences (batch 8 of 1024), for benchmarks/gpu.py: AdamW, next-token
cross-entropy.

Mixed precision written by hand with torch.amp, as an expert would: autocast around the forward
pass and the loss in AMPREWRITE_DTYPE (float16 or bfloat16; default: float16 on cuda, bfloat16
elsewhere), a GradScaler that is on for float16 only (the TF32 setting is the caller's).

`build(device)` makes the model (compiled with `torch.compile(backend=BENCH_COMPILE)` when
that variable is set), optimizer and data once; `train(state, steps)` runs `steps` steps and
returns each step's time (seconds, the device synchronized) and loss. BENCH_SIZE=smoke makes
everything tiny (a CPU check of the code paths).
"""

import os
import time

import torch
import torch.nn.functional as F
from torch import nn

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln_2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.fc_proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, d_model = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(d_model, dim=2)
        q, k, v = (t.view(batch, length, self.n_head, -1).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(batch, length, d_model))
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab: int, context: int, d_model: int, n_head: int,
                 n_layer: int) -> None:
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(context, d_model)
        self.blocks = nn.Sequential(*(Block(d_model, n_head) for _ in range(n_layer)))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok_emb.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok_emb(tokens) + self.pos_emb(positions)
        return self.head(self.ln_f(self.blocks(x)))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def build(device: torch.device) -> dict:
    smoke = os.environ.get("BENCH_SIZE") == "smoke"
    vocab, context, d_model, n_head, n_layer, batch = (
        (128, 16, 32, 2, 2, 2) if smoke else (50304, 1024, 768, 12, 12, 8))
    torch.manual_seed(0)
    model = GPT(vocab, context, d_model, n_head, n_layer).to(device)
    backend = os.environ.get("BENCH_COMPILE")
    if backend:
        model = torch.compile(model, backend=backend)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    sequences = [torch.randint(0, vocab, (batch, context + 1), device=device) for _ in range(4)]
    batches = [(sequence[:, :-1], sequence[:, 1:]) for sequence in sequences]
    model.train()
    return {"model": model, "optimizer": optimizer, "batches": batches, "device": device}


def train(state: dict, steps: int) -> dict:
    model, optimizer, device = state["model"], state["optimizer"], state["device"]
    loss_fn = lm_loss
    dtype = DTYPES[os.environ.get("AMPREWRITE_DTYPE")
                   or ("float16" if device.type == "cuda" else "bfloat16")]
    scaler = torch.amp.GradScaler(device.type, enabled=(dtype == torch.float16))
    step_times, losses = [], []
    for step in range(steps):
        inputs, targets = state["batches"][step % len(state["batches"])]
        started = time.perf_counter()
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=dtype):
            outputs = model(inputs)
            loss = loss_fn(outputs, targets)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        if device.type == "cuda":
            torch.cuda.synchronize()
        step_times.append(time.perf_counter() - started)
        losses.append(loss.item())
    return {"step_times": step_times, "losses": losses}
