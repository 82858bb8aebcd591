"""Forwards that assign into tensors (``t[key] = v``) and size new tensors from their input."""

import torch
from torch import nn


class Filled(nn.Module):
    """A tensor made to the batch's size and filled in slices, then a masked write."""

    def __init__(self, d=8):
        super().__init__()
        self.a = nn.Linear(d, d)
        self.b = nn.Linear(d, 4)

    def forward(self, x):
        h = self.a(x)
        out = torch.zeros(x.shape[0], 12)
        out[:, :4] = self.b(h)
        out[:, 4:] = h
        y = out * 2
        y[x.sum(-1) > 0] = 0.0
        return y


class Tracked(nn.Module):
    """Writes a statistic into a buffer; positions counted off the input's length."""

    def __init__(self, d=8, n=16):
        super().__init__()
        self.pos = nn.Embedding(n, d)
        self.a = nn.Linear(d, d)
        self.register_buffer("last", torch.zeros(d))

    def forward(self, x):
        h = self.a(x + self.pos(torch.arange(x.shape[1])))
        self.last[:] = h.detach().mean((0, 1))
        return h * 2


class Cleaned(nn.Module):
    """Writes into its own input, and into a layer's output through a view of it."""

    def __init__(self, d=8):
        super().__init__()
        self.a = nn.Linear(d, d)

    def forward(self, x):
        x[:, 0] = 0.0
        h = self.a(x)
        h.view(-1, 2, 4)[:, 0] = 1.0
        return h * x


class Weighted(nn.Module):
    """Tensors made from constants in the forward: a weighting and an index."""

    def __init__(self, d=8):
        super().__init__()
        self.a = nn.Linear(d, d)

    def forward(self, x):
        h = self.a(x) * torch.tensor([1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 1.0, float("inf")])
        h[:, torch.tensor([0, 2])] = 0.0
        return h.clamp(max=5.0)


class ScaledByMode(nn.Module):
    """A constant that depends on the mode: the two traces differ in its value only."""

    def __init__(self, d=8):
        super().__init__()
        self.a = nn.Linear(d, d)

    def forward(self, x):
        return self.a(x) * torch.tensor(2.0 if self.training else 3.0)


class _Ramp(nn.Module):
    """Makes a constant of 300 values in its forward: too many to write out."""

    def forward(self, x):
        return x.sum(-1, keepdim=True) * torch.linspace(0.0, 1.0, 300)


class Ramped(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.a = nn.Linear(d, d)
        self.ramp = _Ramp()
        self.b = nn.Linear(300, d)

    def forward(self, x):
        return self.b(self.ramp(self.a(x)))


class Counted(nn.Module):
    """Counts its calls in a buffer (``self.steps += 1``, which rebinds the buffer)."""

    def __init__(self, d=8):
        super().__init__()
        self.a = nn.Linear(d, d)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.steps += 1
        return self.a(x)


class _ActNorm(nn.Module):
    """Initialised from the first batch it sees: a branch on a buffer's value."""

    def __init__(self, d=8):
        super().__init__()
        self.loc = nn.Parameter(torch.zeros(d))
        self.register_buffer("initialized", torch.tensor(0, dtype=torch.uint8))

    def forward(self, x):
        if self.initialized.item() == 0:
            with torch.no_grad():
                self.loc.copy_(-x.mean(0))
                self.initialized.fill_(1)
        return x + self.loc


class Normed(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.a = nn.Linear(d, d)
        self.norm = _ActNorm(d)

    def forward(self, x):
        return self.norm(self.a(x))
