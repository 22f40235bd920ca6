"""Gradient accumulation (loss / accum_steps), OneCycleLR stepped per optimizer step, label
smoothing, early stopping on a validation loss with patience."""
import argparse

import numpy as np
import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--accum-steps", type=int, default=2)
parser.add_argument("--epochs", type=int, default=4)
parser.add_argument("--patience", type=int, default=2)
parser.add_argument("--label-smoothing", type=float, default=0.1)
args = parser.parse_args()

torch.manual_seed(0)
proto = torch.randn(5, 20) * 1.2
ys = torch.randint(0, 5, (640,))
xs = proto[ys] + torch.randn(640, 20)
train_ds = torch.utils.data.TensorDataset(xs[:512], ys[:512])
val_x, val_y = xs[512:], ys[512:]
loader = torch.utils.data.DataLoader(train_ds, batch_size=32, shuffle=True)

model = nn.Sequential(nn.Linear(20, 64), nn.GELU(), nn.Linear(64, 5))
criterion = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
steps_per_epoch = len(loader) // args.accum_steps
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-2, total_steps=args.epochs * steps_per_epoch)

best_val, bad_epochs = float("inf"), 0
for epoch in range(args.epochs):
    model.train()
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x), y)
        loss = loss / args.accum_steps
        loss.backward()
        if (step + 1) % args.accum_steps == 0:
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
    model.eval()
    with torch.no_grad():
        val_loss = criterion(model(val_x), val_y).item()
        val_acc = np.mean(model(val_x).argmax(1).numpy() == val_y.numpy())
    print(f"epoch {epoch} val loss {val_loss:.4f} acc {val_acc:.3f}")
    if val_loss < best_val - 1e-4:
        best_val, bad_epochs = val_loss, 0
        torch.save(model.state_dict(), "best_model.pt")
    else:
        bad_epochs += 1
        if bad_epochs >= args.patience:
            print("early stopping")
            break
