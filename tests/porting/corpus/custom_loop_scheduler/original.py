"""A custom loop with warmup + cosine LR, gradient clipping and a best-checkpoint (plain PyTorch)."""

import math

import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(12, 32), nn.Tanh(), nn.Linear(32, 12))
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
warmup, total = 5, 40


def lr_at(step):
    if step < warmup:
        return 3e-3 * (step + 1) / warmup
    t = (step - warmup) / (total - warmup)
    return 1e-5 + 0.5 * (3e-3 - 1e-5) * (1 + math.cos(math.pi * t))


scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_at(s) / 3e-3)
data = torch.randn(64, 12)
best = float("inf")
for step in range(total):
    batch = data[(step * 8) % 64 : (step * 8) % 64 + 8]
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(batch), batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    if loss.item() < best:
        best = loss.item()
        torch.save(model.state_dict(), "best.pt")
