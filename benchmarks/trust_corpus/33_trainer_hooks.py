"""A small Trainer class with callback hooks (on_train_begin / on_batch_end / on_epoch_end)."""
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn


class Callback:
    def on_train_begin(self, trainer): pass
    def on_batch_end(self, trainer, loss): pass
    def on_epoch_end(self, trainer, epoch): pass


class LossHistory(Callback):
    def __init__(self):
        self.losses = []

    def on_batch_end(self, trainer, loss):
        self.losses.append(loss)

    def on_epoch_end(self, trainer, epoch):
        print(f"epoch {epoch}: mean loss {np.mean(self.losses[-8:]):.4f}")


class GradNormLogger(Callback):
    def on_batch_end(self, trainer, loss):
        norms = [p.grad.norm().item() for p in trainer.model.parameters() if p.grad is not None]
        trainer.state["grad_norm"] = float(np.sqrt(np.sum(np.square(norms))))


@dataclass
class Trainer:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    loss_fn: nn.Module
    callbacks: list = field(default_factory=list)
    state: dict = field(default_factory=dict)

    def _hook(self, name, *args):
        for cb in self.callbacks:
            getattr(cb, name)(self, *args)

    def training_step(self, batch):
        x, y = batch
        out = self.model(x)
        return self.loss_fn(out, y)

    def fit(self, loader, epochs):
        self._hook("on_train_begin")
        for epoch in range(epochs):
            self.model.train()
            for batch in loader:
                self.optimizer.zero_grad()
                loss = self.training_step(batch)
                loss.backward()
                self.optimizer.step()
                self._hook("on_batch_end", loss.item())
            self._hook("on_epoch_end", epoch)


if __name__ == "__main__":
    torch.manual_seed(0)
    x = torch.randn(512, 8)
    y = (x[:, :2].sum(1, keepdim=True) > 0).float()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=64, shuffle=True)
    net = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 1))
    trainer = Trainer(net, torch.optim.Adam(net.parameters(), lr=5e-3), nn.BCEWithLogitsLoss(),
                      callbacks=[LossHistory(), GradNormLogger()])
    trainer.fit(loader, epochs=3)
    print("last grad norm", round(trainer.state["grad_norm"], 4))
