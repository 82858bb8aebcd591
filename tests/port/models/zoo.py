"""Patterns from model zoos (timm, torchvision): a tuple of dims, buffers read in forward, many
copies of a block fx cannot trace, values fx names the way flodl names nodes."""

import torch
from dynamic import Gate  # a block fx cannot trace: its branch is decided by the data
from torch import nn


class Pooled(nn.Module):
    """``x.mean((2, 3), keepdim=True)``: a tuple argument, as squeeze-excite blocks write it."""

    def __init__(self, channels=4):
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3)
        self.fc = nn.Linear(channels, 2)

    def forward(self, x):
        return self.fc(self.conv(x).mean((2, 3), keepdim=True).flatten(1))


class Window(nn.Module):
    """A relative-position table indexed by a buffer that is not saved, as Swin's attention."""

    def __init__(self, n=4):
        super().__init__()
        self.table = nn.Parameter(torch.randn(2 * n - 1))
        index = torch.arange(n)[:, None] - torch.arange(n)[None, :] + n - 1
        self.register_buffer("index", index, persistent=False)

    def forward(self, x):
        return x @ self.table[self.index]


class Masked(nn.Module):
    """Buffers read directly: one saved (``scale``), one in a submodule and not saved."""

    def __init__(self, n=4):
        super().__init__()
        self.register_buffer("scale", torch.linspace(0.5, 2.0, n))
        self.window = Window(n)
        self.out = nn.Linear(n, 2)

    def forward(self, x):
        return self.out(self.window(x * self.scale))


class ManyGates(nn.Module):
    """More copies of an untraceable block than the tracer would retry one by one."""

    def __init__(self, dim=4, depth=40):
        super().__init__()
        self.gates = nn.ModuleList(Gate(dim) for _ in range(depth))
        self.out = nn.Linear(dim, 2)

    def forward(self, x):
        for gate in self.gates:
            x = gate(x)
        return self.out(x)


class Residuals(nn.Module):
    """Returns ``x + 1`` after three residual sums: fx names that value ``add_3``, the id flodl
    gives the graph's first residual node, so the port must tag it otherwise."""

    def __init__(self, dim=4, depth=3):
        super().__init__()
        self.fs = nn.ModuleList(nn.Linear(dim, dim) for _ in range(depth))
        self.o = nn.Linear(dim, dim)

    def forward(self, x):
        for f in self.fs:
            x = x + f(x)
        return self.o(x), x + 1


class Mixed(nn.Module):
    """``x`` read by three layers, two of them joined by a layer that takes both: whichever
    comes first in a builder layout, ``n`` must be forked before the second is run, so no
    layout reads ``x`` in the original's order (a, b, n)."""

    def __init__(self, d=4):
        super().__init__()
        self.a, self.b, self.n = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.mix = nn.Bilinear(d, d, d)

    def forward(self, x):
        return self.mix(self.a(x), self.b(x)) - self.n(x)


class Fourier(nn.Module):
    """A table built on a weight's device, as XCiT's positional encoding: an expression that
    reads a weight and no activation, so the stream never passes through it."""

    def __init__(self, d=4):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        table = torch.arange(4, device=self.proj.weight.device) / 4
        return self.proj(x) * torch.sin(table) + torch.cos(table)


class Attention(nn.Module):
    """``q, k, v`` unbound from one projection, as XCiT's attention: a tuple read three times,
    whose parts are tensors of their own (no gradient is summed over the tuple)."""

    def __init__(self, d=4):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        q, k, v = self.qkv(x).reshape(x.shape[0], 3, -1).unbind(1)
        attn = torch.softmax(torch.nn.functional.normalize(k, dim=-1) * q, dim=-1)
        return self.out(attn * v)
