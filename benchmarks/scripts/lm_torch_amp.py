"""lm_fp32.py with mixed precision written by hand with torch.amp: autocast around the
forward pass and the loss, a GradScaler that is on for float16 only.

Environment: AMPREWRITE_DEVICE (default: cuda when available, else cpu), AMPREWRITE_DTYPE
(float16 or bfloat16; default: float16 on cuda, bfloat16 elsewhere), BENCH_STEPS,
BENCH_SEED. Prints one JSON line: the time of each step (seconds) and each step's loss.
"""

import json
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}

VOCAB, CONTEXT = 4096, 128


class TinyLM(nn.Module):
    def __init__(self, d_model: int = 256, n_head: int = 4, n_layer: int = 4) -> None:
        super().__init__()
        self.tok_emb = nn.Embedding(VOCAB, d_model)
        self.pos_emb = nn.Embedding(CONTEXT, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_head, dim_feedforward=4 * d_model,
                                           dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, n_layer, enable_nested_tensor=False)
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        positions = torch.arange(length, device=tokens.device)
        h = self.tok_emb(tokens) + self.pos_emb(positions)
        mask = nn.Transformer.generate_square_subsequent_mask(length, device=tokens.device)
        h = self.blocks(h, mask=mask, is_causal=True)
        return self.head(self.ln_f(h))


def main() -> dict[str, list[float]]:
    device = torch.device(
        os.environ.get("AMPREWRITE_DEVICE") or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = DTYPES[os.environ.get("AMPREWRITE_DTYPE")
                   or ("float16" if device.type == "cuda" else "bfloat16")]
    steps = int(os.environ.get("BENCH_STEPS", "20"))
    torch.manual_seed(int(os.environ.get("BENCH_SEED", "0")))

    model = TinyLM().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    scaler = torch.amp.GradScaler(device.type, enabled=(dtype == torch.float16))
    sequences = [torch.randint(0, VOCAB, (16, CONTEXT + 1), device=device) for _ in range(8)]

    model.train()
    step_times, losses = [], []
    for step in range(steps):
        sequence = sequences[step % len(sequences)]
        inputs, targets = sequence[:, :-1], sequence[:, 1:]
        started = time.perf_counter()
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=dtype):
            logits = model(inputs)
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        if device.type == "cuda":
            torch.cuda.synchronize()
        step_times.append(time.perf_counter() - started)
        losses.append(loss.item())
    return {"step_times": step_times, "losses": losses}


if __name__ == "__main__":
    print(json.dumps(main()))
