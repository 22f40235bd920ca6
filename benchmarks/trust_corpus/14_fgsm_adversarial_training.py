"""Adversarial training with FGSM examples (Goodfellow et al.) on a synthetic 2-class image task."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

EPSILON = 0.05
torch.manual_seed(5)


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 8, 3)
        self.fc1 = nn.Linear(8 * 6 * 6, 32)
        self.fc2 = nn.Linear(32, 2)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc2(F.relu(self.fc1(x)))


def make_batch(n):
    y = torch.randint(0, 2, (n,))
    x = 0.6 * torch.randn(n, 1, 14, 14)
    x[y == 1, :, :7, :] += 0.15
    x[y == 0, :, 7:, :] += 0.15
    return x, y


def fgsm_attack(model, images, labels, epsilon):
    images = images.clone().requires_grad_(True)
    output = model(images)
    loss = F.cross_entropy(output, labels)
    model.zero_grad()
    loss.backward()
    perturbed = images + epsilon * images.grad.sign()
    return perturbed.detach()


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for it in range(15):
    data, target = make_batch(64)
    adv = fgsm_attack(model, data, target, EPSILON)
    model.train()
    optimizer.zero_grad()
    output = model(torch.cat([data, adv]))
    loss = F.cross_entropy(output, torch.cat([target, target]))
    loss.backward()
    optimizer.step()
    if it % 5 == 0:
        print(f"iter {it} loss {loss.item():.4f}")

model.eval()
test_x, test_y = make_batch(256)
adv_x = fgsm_attack(model, test_x, test_y, EPSILON)
with torch.no_grad():
    clean_pred = model(test_x).argmax(1).numpy()
    adv_pred = model(adv_x).argmax(1).numpy()
print("clean acc %.3f, adversarial acc %.3f" % ((clean_pred == test_y.numpy()).mean(), (adv_pred == test_y.numpy()).mean()))
