"""Small CNN with BatchNorm and a cosine schedule; numpy metrics, a hand-made confusion matrix
and a loss curve saved with matplotlib."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

NUM_CLASSES = 4
EPOCHS = 3
torch.manual_seed(0)


def make_images(n, gen):
    y = torch.randint(0, NUM_CLASSES, (n,), generator=gen)
    x = 1.0 * torch.randn(n, 1, 12, 12, generator=gen)
    for c in range(NUM_CLASSES):
        r, col = divmod(c, 2)
        x[y == c, :, r * 6:(r + 1) * 6, col * 6:(col + 1) * 6] += 0.25
    return x, y


gen = torch.Generator().manual_seed(0)
train_x, train_y = make_images(384, gen)
test_x, test_y = make_images(128, gen)
train_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(train_x, train_y), batch_size=64, shuffle=True)
test_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(test_x, test_y), batch_size=64)


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 3 * 3, NUM_CLASSES)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(x.flatten(1))


model = SmallCNN()
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=EPOCHS)
train_losses = []

for epoch in range(EPOCHS):
    model.train()
    for images, labels in train_loader:
        outputs = model(images)
        loss = F.cross_entropy(outputs, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        train_losses.append(loss.data.numpy())
    scheduler.step()

    model.eval()
    all_preds, all_labels = [], []
    with torch.no_grad():
        for images, labels in test_loader:
            all_preds.append(model(images).argmax(1).numpy())
            all_labels.append(labels.numpy())
    preds, truth = np.concatenate(all_preds), np.concatenate(all_labels)
    print("epoch %d loss %.4f test acc %.3f" % (epoch, np.mean(train_losses[-6:]), (preds == truth).mean()))

confusion = np.zeros((NUM_CLASSES, NUM_CLASSES), dtype=int)
for t, p in zip(truth, preds):
    confusion[t, p] += 1
print(confusion)
plt.plot(np.array(train_losses))
plt.xlabel("iteration")
plt.ylabel("loss")
plt.savefig("loss_curve.png")
