"""Stochastic weight averaging with torch.optim.swa_utils: AveragedModel, SWALR, update_bn."""
import torch
import torch.nn as nn
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn

torch.manual_seed(0)
X = torch.randn(640, 12)
Y = torch.sin(X[:, :3].sum(1, keepdim=True)) + 0.1 * torch.randn(640, 1)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_size=64, shuffle=True)

model = nn.Sequential(nn.Linear(12, 64), nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
swa_model = AveragedModel(model)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=3)
swa_start = 1
swa_scheduler = SWALR(optimizer, swa_lr=0.02, anneal_epochs=1)
loss_fn = nn.MSELoss()

for epoch in range(3):
    for input, target in loader:
        optimizer.zero_grad()
        loss_fn(model(input), target).backward()
        optimizer.step()
    if epoch > swa_start:
        swa_model.update_parameters(model)
        swa_scheduler.step()
    else:
        scheduler.step()
    print(f"epoch {epoch} lr {optimizer.param_groups[0]['lr']:.4f}")

# Update bn statistics for the swa_model at the end
update_bn(loader, swa_model)
swa_model.eval()
with torch.no_grad():
    print("swa mse %.4f" % loss_fn(swa_model(X), Y).item())
