"""Additive-attention pooling classifier over padded sequences; forward returns the attention
weights as numpy for a heatmap, scores masked with -1e9 where padded."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402


class AttnPool(nn.Module):
    def __init__(self, vocab=30, d=32, n_cls=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d, padding_idx=0)
        self.proj = nn.Linear(d, d)
        self.score = nn.Linear(d, 1)
        self.cls = nn.Linear(d, n_cls)

    def forward(self, tokens, mask):
        h = torch.tanh(self.proj(self.emb(tokens)))
        scores = self.score(h).squeeze(-1)
        scores = scores.masked_fill(mask == 0, -1e9)
        attn = torch.softmax(scores, dim=-1)
        pooled = torch.bmm(attn.unsqueeze(1), h).squeeze(1)
        return self.cls(pooled), attn.detach().cpu().numpy()


def make_batch(rng, n=64, max_len=12):
    lengths = rng.randint(4, max_len + 1, size=n)
    tokens = np.zeros((n, max_len), dtype=np.int64)
    labels = np.zeros(n, dtype=np.int64)
    for i, L in enumerate(lengths):
        tokens[i, :L] = rng.randint(2, 30, size=L)
        if rng.rand() < 0.5:
            tokens[i, rng.randint(L)] = 1  # the "keyword"
            labels[i] = 1
    mask = (tokens != 0).astype(np.int64)
    return torch.from_numpy(tokens), torch.from_numpy(mask), torch.from_numpy(labels)


rng = np.random.RandomState(0)
torch.manual_seed(0)
model = AttnPool()
optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
criterion = nn.CrossEntropyLoss()
for step in range(20):
    tokens, mask, labels = make_batch(rng)
    logits, attn = model(tokens, mask)
    loss = criterion(logits, labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 5 == 0:
        print(f"step {step} loss {loss.item():.4f} max attention {attn.max():.3f}")

plt.imshow(attn[:8], aspect="auto", cmap="viridis")
plt.colorbar()
plt.savefig("attention.png")
