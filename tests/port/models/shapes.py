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


def _broadcast_to(table, x):
    """llama2.c's ``reshape_for_broadcast``: the table viewed with ``x``'s rank, its sizes kept
    at dims 1 and -1 (a test on ``x.ndim`` per dim)."""
    ndim = x.ndim
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(x.shape)]
    return table.view(shape)


class Rotary(nn.Module):
    """Rotates feature pairs by a position table: the rank tests read a piece of an unbind."""

    def __init__(self, length=6, dim=8):
        super().__init__()
        self.register_buffer("cos", torch.rand(length, dim // 2))

    def forward(self, x):
        shape = x.shape[:-1] + (-1, 2)  # noqa: RUF005 (as llama2.c writes it: a shape plus a tuple)
        real, imag = x.float().reshape(shape).unbind(-1)
        cos = _broadcast_to(self.cos[: x.shape[1]], real)
        return torch.stack([real * cos, imag * cos], dim=-1).flatten(2).type_as(x)


class Masked(nn.Module):
    """A ``.float()`` step beside a ``float('-inf')`` constant: the step's function must not be
    named ``float``."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        h = self.fc(x).float()
        return h.masked_fill(h > 0.5, float("-inf")).softmax(-1)


class _Transform(nn.Module):
    """PointNet's input transform: an identity moved to the input's device when it is on a GPU
    (a branch on ``x.is_cuda``)."""

    def __init__(self, dim=3):
        super().__init__()
        self.fc = nn.Linear(dim, dim * dim)
        self.dim = dim

    def forward(self, x):
        identity = torch.eye(self.dim).flatten().repeat(x.shape[0], 1)
        if x.device.type == "mps":
            identity = identity.to(x.device)
        if x.is_cuda:
            identity = identity.cuda()
        return (self.fc(x) + identity).view(-1, self.dim, self.dim)


class _ToFloat(nn.Module):
    """Half precision made float32 again (a branch on ``x.dtype``)."""

    def forward(self, x):
        if x.dtype == torch.float16:
            x = x.float()
        return x


class Placed(nn.Module):
    """A branch on the input's device and one on its dtype, each in a module of its own."""

    def __init__(self, dim=3):
        super().__init__()
        self.transform = _Transform(dim)
        self.cast = _ToFloat()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        y = torch.bmm(x.unsqueeze(1), self.transform(x)).squeeze(1)
        return self.fc(self.cast(y))


class Summed(nn.Module):
    """Sums a layer over the tensors of a list passed in, and weighs each by its place."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, xs):
        total = sum(self.fc(x) for x in xs)
        return total + sum(i * xs[i] for i in range(len(xs)))


class _Positions(nn.Module):
    """A positional table kept as a plain attribute (not a buffer), sliced to the length."""

    def __init__(self, dim=8, length=16):
        super().__init__()
        self.table = torch.linspace(-1, 1, length * dim).view(1, length, dim)

    def forward(self, x):
        return x + self.table[:, : x.size(1)]


class Unregistered(nn.Module):
    """A causal mask and a positional table held as plain tensor attributes."""

    def __init__(self, dim=8, length=16):
        super().__init__()
        self.pos = _Positions(dim, length)
        self.mask = torch.tril(torch.ones(length, length))
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        h = self.pos(x)
        t = x.shape[1]
        scores = (h @ h.transpose(1, 2)).masked_fill(self.mask[:t, :t] == 0, float("-inf"))
        return self.fc(scores.softmax(-1) @ h)


class Batched(nn.Module):
    """``len(x)`` as the batch size, as training scripts write it (``b = len(x)``)."""

    def __init__(self, dim=8):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        b = len(x)
        h = self.fc(x).view(b, -1)
        return h + torch.arange(len(h)).unsqueeze(1)


class _Rows(nn.Module):
    """A loop over the batch's rows by index: its count is the batch size."""

    def forward(self, x):
        return torch.stack([x[i] * i for i in range(len(x))])


class AroundRows(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.rows = _Rows()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return self.fc(self.rows(x))


class HalfAware(nn.Module):
    """T5's layer norm, a branch on its own weight's dtype (kept in half precision when the
    model is), and a mask filled with the lowest value of the scores' dtype, as attention
    masks are (``torch.finfo(scores.dtype).min``)."""

    def __init__(self, dim=8):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        if self.weight.dtype in [torch.float16, torch.bfloat16]:
            h = h.to(self.weight.dtype)
        scores = self.fc(self.weight * h)
        return scores.masked_fill(scores < 0, torch.finfo(scores.dtype).min)


class Clamped(nn.Module):
    """T5's block: a residual stream clamped when it is float16, which it is not under autocast
    (float32 plus a half-precision layer's output is float32)."""

    def __init__(self, dim=8):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        h = x + self.fc(x)
        if h.dtype == torch.float16:
            h = h.clamp(-1000.0, 1000.0)
        return h
