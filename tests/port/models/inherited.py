"""Constructors the port does not copy from the class itself: none of its own, a base's, and
annotations naming what the script imports."""

from typing import Any

import torch
from torch import nn


class Doubled(nn.Module):  # no __init__: nn.Module's, which takes no arguments
    def forward(self, x):
        return torch.relu(x) * 2


class Base(nn.Module):
    def __init__(self, dim: int = 4):
        super().__init__()
        self.linear = nn.Linear(dim, dim)

    def forward(self, x):
        return self.linear(x)


class Child(Base):  # Base's __init__
    def forward(self, x):
        return torch.relu(self.linear(x))


class Annotated(nn.Module):
    def __init__(self, dim: Any = None):
        super().__init__()
        self.linear = nn.Linear(dim or 4, 3)

    def forward(self, x):
        return self.linear(x)
