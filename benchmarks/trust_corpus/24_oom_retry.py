# Training with an out-of-memory guard around forward/backward (fairseq-style retry).
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.02)
criterion = nn.MSELoss()
w = torch.randn(32, 1) / 4
ooms = 0

for step in range(20):
    x = torch.randn(96, 32)
    y = x @ w
    try:
        optimizer.zero_grad()
        out = model(x)
        loss = criterion(out, y)
        loss.backward()
    except RuntimeError as e:
        if "out of memory" in str(e):
            ooms += 1
            print("| WARNING: ran out of memory, skipping batch")
            optimizer.zero_grad()
            continue
        raise
    optimizer.step()
    if step % 5 == 0:
        print("step %d loss %.5f" % (step, loss.item()))
print("ooms:", ooms)
