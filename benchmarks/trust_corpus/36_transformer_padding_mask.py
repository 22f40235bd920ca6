"""Tiny transformer encoder classifier with a key padding mask and a hand-written attention
whose scores are masked with float('-inf'); predictions gathered with np.concatenate."""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class SelfAttention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.h, self.dk = heads, d // heads
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)

    def forward(self, x, pad_mask):
        B, L, D = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, self.h, self.dk).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.dk)
        scores = scores.masked_fill(pad_mask[:, None, None, :], float("-inf"))
        attn = F.softmax(scores, dim=-1)
        return self.o((attn @ v).transpose(1, 2).reshape(B, L, D))


class Encoder(nn.Module):
    def __init__(self, vocab=16, d=32, heads=4, n_cls=3):
        super().__init__()
        self.emb = nn.Embedding(vocab, d, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(1, 10, d) * 0.02)
        self.attn = SelfAttention(d, heads)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, d))
        self.out = nn.Linear(d, n_cls)

    def forward(self, tokens):
        pad = tokens == 0
        x = self.emb(tokens) + self.pos[:, : tokens.size(1)]
        x = self.ln1(x + self.attn(x, pad))
        x = self.ln2(x + self.ff(x))
        keep = (~pad).unsqueeze(-1).float()
        return self.out((x * keep).sum(1) / keep.sum(1))


def batch(gen, n=64):
    lengths = torch.randint(3, 11, (n,), generator=gen)
    tokens = torch.randint(1, 16, (n, 10), generator=gen)
    tokens[torch.arange(10)[None] >= lengths[:, None]] = 0
    labels = (tokens == 5).sum(1).clamp(max=2)
    return tokens, labels


gen = torch.Generator().manual_seed(0)
torch.manual_seed(0)
model = Encoder()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(20):
    tokens, labels = batch(gen)
    loss = F.cross_entropy(model(tokens), labels)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 5 == 0:
        print(f"step {step} loss {loss.item():.4f}")

model.eval()
preds, gold = [], []
with torch.no_grad():
    for _ in range(3):
        tokens, labels = batch(gen)
        preds.append(model(tokens).softmax(-1).numpy())
        gold.append(labels.numpy())
preds, gold = np.concatenate(preds), np.concatenate(gold)
print("accuracy", (preds.argmax(1) == gold).mean())
