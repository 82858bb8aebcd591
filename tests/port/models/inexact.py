"""A forward whose result depends on how often it ran: tracing freezes the count, so the
port cannot match it (the parity check must catch this)."""

from torch import nn


class Drifting(nn.Module):
    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.fc(x) * self.calls


class Broken(nn.Module):
    def __init__(self, dim):
        super().__init__()
        if dim < 1:
            raise ValueError("dim must be positive")
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return self.fc(x)
