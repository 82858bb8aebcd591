"""flodl port of original.py: fl.optim warmup + cosine as a pure calculator, .fdl checkpoints."""

import torch
from torch import nn

import flodl as fl

fl.manual_seed(0)
model = fl.FlowBuilder(nn.Linear(12, 32)).through(nn.Tanh()).through(nn.Linear(32, 12)).build()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
warmup, total = 5, 40
schedule = fl.optim.WarmupScheduler(
    fl.optim.CosineScheduler(3e-3, 1e-5, total - warmup), 3e-3, warmup
)

data = torch.randn(64, 12)
best = float("inf")
for step in range(total):
    batch = data[(step * 8) % 64 : (step * 8) % 64 + 8]
    fl.optim.set_lr(optimizer, schedule.lr(step))
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(batch), batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    if loss.item() < best:
        best = loss.item()
        model.save_checkpoint("best.fdl")
