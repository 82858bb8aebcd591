"""A port that names only real APIs but wires a 32-wide layer after a 16-wide one."""

import torch
from torch import nn

import flodl as fl

model = fl.FlowBuilder(nn.Linear(8, 16)).through(nn.ReLU()).through(nn.Linear(32, 2)).build()
x = torch.randn(4, 8)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss = model(x).sum()
loss.backward()
