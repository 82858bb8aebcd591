"""A port that invents flodl names (checked against tests/apiref/fixtures/mini)."""

from torch import nn

import flodl as fl
from flodl.nn import StateAd

model = fl.Sequential(nn.Linear(4, 4))
memory = fl.StateAdd()
print(StateAd)
