"""Small modules shared by the graph tests (picklable: defined at module level)."""

from __future__ import annotations

import torch
from torch import nn


def identity_linear(n: int, bias: float = 0.0) -> nn.Linear:
    layer = nn.Linear(n, n)
    with torch.no_grad():
        layer.weight.copy_(torch.eye(n))
        layer.bias.fill_(bias)
    return layer


class Scale(nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor


class AddBias(nn.Module):
    """x + b with a learnable b (for BPTT gradient counting)."""

    def __init__(self, n: int = 2) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        return x + self.bias


class AddRef(nn.Module):
    """forward_named: x + Σ refs (records what it received)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[dict] = []

    def forward(self, x):
        return x

    def forward_named(self, x, refs):
        self.seen.append(dict(refs))
        for v in refs.values():
            x = x + v
        return x


class TakesCtx(nn.Module):
    """Positional / keyword refs: x + ctx (+ 10 * bonus)."""

    def forward(self, x, ctx, bonus=None):
        out = x + ctx
        if bonus is not None:
            out = out + 10 * bonus
        return out


class EqualRouter(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, x):
        return torch.full((*x.shape[:-1], self.n), 1.0 / self.n)
