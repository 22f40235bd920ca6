import torch
import torch.nn as nn
import torch.nn.functional as F


class PGDTrainer:
    """Madry-style adversarial training: PGD with torch.autograd.grad, then a training step."""

    def __init__(self, model, eps=0.1, alpha=0.03, steps=3, lr=1e-2):
        self.model = model
        self.eps, self.alpha, self.steps = eps, alpha, steps
        self.optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        self.criterion = nn.CrossEntropyLoss()
        self.history = []

    def perturb(self, x, y):
        delta = torch.zeros_like(x).uniform_(-self.eps, self.eps).requires_grad_(True)
        for _ in range(self.steps):
            loss = self.criterion(self.model(x + delta), y)
            (grad,) = torch.autograd.grad(loss, delta)
            delta = (delta + self.alpha * grad.sign()).clamp(-self.eps, self.eps).detach().requires_grad_(True)
        return (x + delta).detach()

    def train_step(self, x, y):
        x_adv = self.perturb(x, y)
        self.model.train()
        logits = self.model(x_adv)
        loss = self.criterion(logits, y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.history.append(loss.item())
        return loss.item()

    def fit(self, batches):
        for i, (x, y) in enumerate(batches):
            loss = self.train_step(x, y)
            if i % 4 == 0:
                print(f"step {i} adv loss {loss:.4f}")


if __name__ == "__main__":
    torch.manual_seed(0)
    W = torch.randn(20, 5)
    X = torch.randn(1024, 20)
    Y = (X @ W).argmax(1)
    batches = [(X[i:i + 64], Y[i:i + 64]) for i in range(0, 1024, 64)]
    net = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 5))
    trainer = PGDTrainer(net)
    trainer.fit(batches)
    print("first %.3f last %.3f" % (trainer.history[0], trainer.history[-1]))
