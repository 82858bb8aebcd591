"""False pass (fixed): an invented method after the training loop. The smoke run now reaches
line 16 and fails there with AttributeError; with --no-run it is listed as unverified."""

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
model.save_weights("model.fdl")
