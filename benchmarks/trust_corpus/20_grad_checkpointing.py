import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class DeepMLP(nn.Module):
    """Residual MLP whose blocks recompute activations in backward (gradient checkpointing)."""

    def __init__(self, d_in, d, depth, n_out, use_checkpoint=True):
        super().__init__()
        self.inp = nn.Linear(d_in, d)
        self.blocks = nn.ModuleList([Block(d) for _ in range(depth)])
        self.out = nn.Linear(d, n_out)
        self.use_checkpoint = use_checkpoint

    def forward(self, x):
        x = self.inp(x)
        for blk in self.blocks:
            if self.use_checkpoint and self.training:
                x = checkpoint(blk, x, use_reentrant=False)
            else:
                x = blk(x)
        return self.out(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--no-checkpoint", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    teacher = torch.randn(32, 4)
    model = DeepMLP(32, 64, args.depth, 4, use_checkpoint=not args.no_checkpoint)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        x = torch.randn(128, 32)
        y = (x @ teacher).argmax(-1)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 5 == 0:
            print(f"{step} {loss.item():.4f}")


if __name__ == "__main__":
    main()
