"""A port that calls builder methods FlowBuilder does not have."""

from torch import nn

import flodl as fl

model = fl.FlowBuilder(nn.Linear(4, 4)).through(nn.ReLU()).residual(nn.Linear(4, 4)).build()
looped = fl.FlowBuilder(nn.Linear(4, 4)).loop_body(nn.Linear(4, 4)).for_each(3).build()
