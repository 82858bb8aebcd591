"""What a forward returns besides a value or a tuple of values."""

from typing import NamedTuple

import torch
from torch import nn


class DictHeads(nn.Module):
    """Two heads returned by name, with a constant beside them."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.a = nn.Linear(dim, 2)
        self.b = nn.Linear(dim, 3)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        return {"logits": self.a(h), "aux": self.b(h), "features": h, "version": 2}


class ListOut(nn.Module):
    """A list of two values (a tuple would be another type)."""

    def __init__(self, dim=4):
        super().__init__()
        self.a = nn.Linear(dim, dim)
        self.b = nn.Linear(dim, dim)

    def forward(self, x):
        return [self.a(x), self.b(x)]


class Twice(nn.Module):
    """One value returned twice."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        y = self.fc(x)
        return y, y


class Pair(NamedTuple):
    first: torch.Tensor
    second: torch.Tensor


class NamedOut(nn.Module):
    """A named tuple, made by calling its class."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        y = self.fc(x)
        return Pair(y, torch.tanh(y))


class ByScale(nn.Module):
    """A dict keyed by a float: not a structure the port writes, so the model is kept whole."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return {0.5: self.fc(x)}
