"""Values a forward leaves on its modules: outputs kept for the caller, and state."""

import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    """Keeps its last attention weights for inspection and a load-balancing style loss."""

    def __init__(self, dim=8):
        super().__init__()
        self.qk = nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        q, k = self.qk(x).chunk(2, dim=-1)
        attn = (q @ k.transpose(-2, -1)).softmax(-1)
        self.last_attn = attn.detach()
        self.aux_loss = (attn.mean(1) ** 2).sum()
        return self.proj(attn @ x)


class Inspected(nn.Module):
    """Two attention blocks and, as llama2.c's Transformer does, the loss left on the model
    when targets are passed."""

    def __init__(self, dim=8, classes=5):
        super().__init__()
        self.first = Attention(dim)
        self.second = Attention(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x, targets):
        h = self.second(torch.relu(self.first(x)))
        logits = self.head(h)
        self.last_loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits


class Decaying(nn.Module):
    """A running mean of its inputs, read before it is written: state the next call reads."""

    def __init__(self, dim=8):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.h = torch.zeros(dim)

    def forward(self, x):
        self.h = self.h * 0.5 + x.detach().mean((0, 1))
        return self.fc(x) + self.h


class Cached(nn.Module):
    """A value computed on the first call only (``hasattr``): the next call reuses it."""

    def __init__(self, dim=8):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        if not hasattr(self, "scale"):
            self.scale = x.detach().abs().mean()
        return self.fc(x) / self.scale


class Twice(nn.Module):
    """The same attribute assigned twice in one forward: only the last value is left."""

    def __init__(self, dim=8):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        h = self.fc(x)
        self.last = h.detach()
        h = torch.tanh(h)
        self.last = h.detach()
        return h


class Stateful(nn.Module):
    """Blocks that keep state around a block that leaves an output: the state keeps its
    block whole, the output does not."""

    def __init__(self, dim=8):
        super().__init__()
        self.decaying = Decaying(dim)
        self.cached = Cached(dim)
        self.twice = Twice(dim)
        self.attention = Attention(dim)

    def forward(self, x):
        return self.attention(self.twice(self.cached(self.decaying(x))))


class LossLeft(nn.Module):
    """llama2.c's Transformer: the loss left on the model when targets are passed, None
    otherwise (and set to None by ``__init__``)."""

    def __init__(self, dim=8, classes=5):
        super().__init__()
        self.head = nn.Linear(dim, classes)
        self.last_loss = None

    def forward(self, x, targets=None):
        logits = self.head(x)
        if targets is not None:
            self.last_loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        else:
            self.last_loss = None
        return logits
