"""False pass (fixed): a wrong keyword after the training loop. Static check: error at line 15."""

import torch
from torch import nn

import flodl as fl

model = fl.FlowBuilder(nn.Linear(4, 2)).build()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _epoch in range(100):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).pow(2).mean().backward()
    optimizer.step()
print("trained")
model.save_checkpoint("model.fdl", compression="gzip")
