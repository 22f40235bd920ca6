"""Train a small conv net on a learnable synthetic task, in FP32 (the README's first run).

Each of the 10 classes is a fixed random 28x28 pattern; a sample is its class's pattern
under noise, so the loss falls from ln(10) = 2.30 within a few epochs, on a CPU in seconds.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def synthetic_patterns(n, patterns, noise, seed):
    """`n` noisy samples of the class patterns, with their labels."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, len(patterns), (n,), generator=g)
    images = patterns[labels] + noise * torch.randn(n, 1, 28, 28, generator=g)
    return images, labels


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 5, stride=2)
        self.fc1 = nn.Linear(8 * 12 * 12, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv(x))
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(x)


def main():
    torch.manual_seed(0)
    patterns = torch.randn(10, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    train_x, train_y = synthetic_patterns(2048, patterns, noise=6.0, seed=2)
    test_x, test_y = synthetic_patterns(512, patterns, noise=6.0, seed=3)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.005, momentum=0.9, weight_decay=1e-3)
    for epoch in range(1, 5):
        model.train()
        total = 0.0
        for start in range(0, len(train_x), 64):
            x, y = train_x[start:start + 64], train_y[start:start + 64]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(x)
        model.eval()
        with torch.no_grad():
            logits = model(test_x)
            test_loss = F.cross_entropy(logits, test_y).item()
            accuracy = (logits.argmax(1) == test_y).float().mean().item()
        print(f"epoch {epoch}  train loss {total / len(train_x):.4f}  "
              f"test loss {test_loss:.4f}  accuracy {accuracy:.0%}")


if __name__ == "__main__":
    main()
