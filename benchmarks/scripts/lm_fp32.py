"""Train a small transformer language model in FP32: token and position embeddings, four
causal nn.TransformerEncoderLayer blocks (d_model 256), a linear head; next-token
cross-entropy on random token sequences (batch 16 of 128 tokens), AdamW.

Environment: AMPREWRITE_DEVICE (default: cuda when available, else cpu), BENCH_STEPS,
BENCH_SEED. Prints one JSON line: the time of each step (seconds) and each step's loss.
"""

import json
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

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
    steps = int(os.environ.get("BENCH_STEPS", "20"))
    torch.manual_seed(int(os.environ.get("BENCH_SEED", "0")))

    model = TinyLM().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    sequences = [torch.randint(0, VOCAB, (16, CONTEXT + 1), device=device) for _ in range(8)]

    model.train()
    step_times, losses = [], []
    for step in range(steps):
        sequence = sequences[step % len(sequences)]
        inputs, targets = sequence[:, :-1], sequence[:, 1:]
        started = time.perf_counter()
        optimizer.zero_grad()
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        step_times.append(time.perf_counter() - started)
        losses.append(loss.item())
    return {"step_times": step_times, "losses": losses}


if __name__ == "__main__":
    print(json.dumps(main()))
