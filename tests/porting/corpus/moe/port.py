"""flodl port of original.py: the MoE layer is one `gate(router, *experts)` step."""

import torch
from torch import nn

import flodl as fl

fl.manual_seed(0)
experts = [nn.Sequential(nn.Linear(16, 16), nn.GELU()) for _ in range(4)]
model = (
    fl.FlowBuilder(nn.Linear(8, 16))
    .gate(fl.nn.SoftmaxRouter(16, 4), *experts)
    .through(nn.Linear(16, 1))
    .build()
)
x, y = torch.randn(32, 8), torch.randn(32, 1)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(5):
    optimizer.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
