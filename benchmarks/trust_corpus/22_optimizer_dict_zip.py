"""Encoder and decoder with their own optimizers and schedulers, held in dicts and zipped."""
import torch
import torch.nn as nn

torch.manual_seed(0)
encoder = nn.Sequential(nn.Linear(20, 48), nn.ReLU(), nn.Linear(48, 8))
decoder = nn.Sequential(nn.Linear(8, 48), nn.ReLU(), nn.Linear(48, 20))
optimizers = {
    "encoder": torch.optim.Adam(encoder.parameters(), lr=3e-3),
    "decoder": torch.optim.SGD(decoder.parameters(), lr=0.05, momentum=0.9),
}
schedulers = {name: torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5) for name, opt in optimizers.items()}

basis = torch.randn(5, 20)
for step in range(25):
    x = torch.randn(64, 5) @ basis
    recon = decoder(encoder(x))
    loss = nn.functional.mse_loss(recon, x)
    for opt in optimizers.values():
        opt.zero_grad()
    loss.backward()
    for opt, sched in zip(optimizers.values(), schedulers.values()):
        torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], 1.0)
        opt.step()
        sched.step()
    if step % 5 == 0:
        print(step, round(loss.item(), 4))
