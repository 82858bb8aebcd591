"""Settings a forward computes with: a port is written for their values, and checks them."""

import enum
from dataclasses import dataclass

import torch
from torch import nn


class Heads(nn.Module):
    """Attention that splits its features into ``self.heads`` heads: a view's size."""

    def __init__(self, dim=8, heads=2):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.heads = heads

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    """A scale and a switch, read by its forward; a name it never reads."""

    def __init__(self, dim, scale=0.5, gated=True):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.scale = scale
        self.gated = gated
        self.name = "block"

    def forward(self, x):
        h = self.fc(x) * self.scale
        if self.gated:
            h = h * torch.sigmoid(h)
        return h


class Nested(nn.Module):
    """Settings on a submodule the port writes out (``block.scale``, ``block.gated``)."""

    def __init__(self, dim=4):
        super().__init__()
        self.block = Block(dim)
        self.out = nn.Linear(dim, dim)
        self.unused = 3

    def forward(self, x):
        return self.out(self.block(x))


class Thresholded(nn.Module):
    """Branches on its input's values: kept whole, and run with its own threshold."""

    def __init__(self):
        super().__init__()
        self.threshold = 0.5

    def forward(self, x):
        return x * 2 if x.mean() > self.threshold else x


class WithKeptWhole(nn.Module):
    """A setting read by the written-out forward (``factor``) beside a module kept whole."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.gate = Thresholded()
        self.factor = 2.0

    def forward(self, x):
        return self.gate(self.fc(x)) * self.factor


class ClassScale(nn.Module):
    """A setting declared on the class (``scale = 0.5``), which an instance may set again."""

    scale = 0.5

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return self.fc(x) * self.scale


class Cast(nn.Module):
    """A dtype setting (``self.dtype``) the forward casts to."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.dtype = torch.float64

    def forward(self, x):
        return self.fc(x).to(self.dtype)


@dataclass
class Config:
    dim: int = 8
    heads: int = 2


class Configured(nn.Module):
    """Settings read through a config object it holds, as nanoGPT's ``self.config``."""

    def __init__(self, config=Config()):  # noqa: B008 (a default config, as model code writes it)
        super().__init__()
        self.config = config
        self.fc = nn.Linear(config.dim, config.dim)

    def forward(self, x):
        b, t, c = x.shape
        h = self.fc(x).view(b, t, self.config.heads, c // self.config.heads)
        return h.softmax(-1).reshape(b, t, c)


class Counted(nn.Module):
    """A call counter the model's own forward keeps: state a graph does not keep."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.calls = 0
        self.scale = 2.0

    def forward(self, x):
        self.calls += 1
        return self.fc(x) * self.scale


class Watched(nn.Module):
    """Attention that keeps its last weights for inspection and counts its calls."""

    def __init__(self, dim=4):
        super().__init__()
        self.score = nn.Linear(dim, dim)
        self.calls = 0

    def forward(self, x):
        weights = self.score(x).softmax(-1)
        self.last_weights = weights.detach()
        self.calls += 1
        return weights * x


class Watching(nn.Module):
    """A model around two ``Watched`` blocks: the blocks keep state, the rest computes."""

    def __init__(self, dim=4):
        super().__init__()
        self.first = Watched(dim)
        self.mid = nn.Linear(dim, dim)
        self.second = Watched(dim)

    def forward(self, x):
        return self.second(torch.relu(self.mid(self.first(x))))


class Pool(enum.Enum):
    MEAN = "mean"
    MAX = "max"


class Pooled(nn.Module):
    """A pooling chosen by an enum, and ones made on the module's device."""

    def __init__(self, dim=4, pool=Pool.MEAN, device="cpu"):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.pool = pool
        self.device = torch.device(device)

    def forward(self, x):
        h = self.fc(x)
        h = h.mean(1) if self.pool is Pool.MEAN else h.amax(1)
        return h + torch.ones(h.shape[-1], device=self.device)
