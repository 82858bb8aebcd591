"""Branches on shapes alone: decided as for the example, and checked on every input."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class LengthBranch(nn.Module):
    """Branches on shapes alone, as transformers' sdpa attention does on the query's length
    (``is_causal = q_length > 1 and ...``): decided as for the example, and checked."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        h = self.fc(x)
        if h.shape[1] > 1 and h.dim() == 3:
            h = h - h.mean(1, keepdim=True)
        return torch.tanh(h)


class PaddedToEven(nn.Module):
    """MobileViT's test: resize when a size is not a multiple of the patch (through math)."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        even = math.ceil(x.shape[1] / 2) * 2
        if even != x.shape[1]:
            x = F.pad(x, (0, 0, 0, even - x.shape[1]))
        return self.fc(x)


class AroundLength(nn.Module):
    """A ``LengthBranch`` between two layers: examples of lengths that branch differently keep
    only it whole."""

    def __init__(self, dim=4):
        super().__init__()
        self.inner = LengthBranch(dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        return self.out(self.inner(x))


class TargetsOptional(nn.Module):
    """nanoGPT's forward: a length asserted against the block size, a loss only with targets
    (``targets=None`` is fixed while tracing), and ``(logits, None)`` returned without them."""

    def __init__(self, vocab=11, dim=4, block=6):
        super().__init__()
        self.block = block
        self.wte = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx, targets=None):
        _, t = idx.size()
        assert t <= self.block, f"Cannot forward a sequence of length {t}"
        logits = self.head(self.wte(idx))
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        else:
            loss = None
        return logits, loss
