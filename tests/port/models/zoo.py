"""Patterns from model zoos (timm, torchvision): a tuple of dims, buffers read in forward, many
copies of a block fx cannot trace, values fx names the way flodl names nodes."""

import torch
import torch.nn.functional as F
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


class Pair(nn.Module):
    """A layer taking ``*xs`` and deciding by the data (so fx keeps it whole): it can only be
    called with the stream as its first argument, never with tags alone."""

    def __init__(self, d=4):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, *xs):
        y = self.lin(xs[0]) * xs[-1]
        return y if y.sum() > 0 else -y


class MixedPairs(nn.Module):
    """``Mixed`` with layers no step can call on tags: no layout in the original's order."""

    def __init__(self, d=4):
        super().__init__()
        self.a, self.b = nn.Linear(d, d), nn.Linear(d, d)
        self.mix, self.n = Pair(d), Pair(d)

    def forward(self, x):
        return self.mix(self.a(x), self.b(x)) - self.n(x)


class Fusion(nn.Module):
    """Two resolutions that exchange features, as HRNet's stages: each output sums a layer of
    its own branch and one applied to the other branch, then both are fused again."""

    def __init__(self, c=4):
        super().__init__()
        self.high, self.low = nn.Conv2d(3, c, 3, padding=1), nn.Conv2d(3, c, 3, 2, 1)
        self.down = nn.Conv2d(c, c, 3, 2, 1)
        self.up = nn.Sequential(nn.Conv2d(c, c, 1), nn.Upsample(scale_factor=2.0))
        self.head = nn.Conv2d(c, 2, 1)

    def forward(self, x):
        high, low = self.high(x), self.low(x)
        fused_high = torch.relu(high + self.up(low))
        fused_low = torch.relu(low + self.down(high))
        return self.head(fused_high + self.up(fused_low))


class Folded(nn.Module):
    """Small expressions between layers (``a * x - x``): written as one function each, they
    run later than the original runs their parts, and autograd sums ``x``'s gradient in
    another order."""

    def __init__(self, d=3):
        super().__init__()
        self.l0, self.l1, self.l2 = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.l3, self.l4 = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        v1 = self.l0(x) * x - x
        v2 = self.l1(v1)
        v3 = self.l2(v1) * v2
        v4 = self.l3(x) + v2
        return v4 + self.l4(v2) * v2 + v3


class InPlace(nn.Module):
    """A write into a value that is then returned: fx records ``add_`` as a value nobody reads."""

    def __init__(self, d=4):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x):
        t = self.lin(x) * 1.5
        t.add_(x)
        return torch.tanh(t)


class Scores(nn.Module):
    """``F.softmax`` of a sum: one function, which fx records with every argument softmax passes
    on (``_stacklevel=3, dtype=None``)."""

    def __init__(self, d=4):
        super().__init__()
        self.q, self.k = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        return F.softmax(self.q(x) + self.k(x), dim=-1)


class Unused(nn.Module):
    """Layers called for their effects only: a dropout whose draw moves the random stream
    (the next dropout's mask depends on it), a batch norm updating its running statistics."""

    def __init__(self, d=4):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.probe, self.drop = nn.Dropout(0.5), nn.Dropout(0.5)
        self.stats = nn.BatchNorm1d(d)

    def forward(self, x):
        h = self.lin(x)
        self.probe(h)
        self.stats(x)
        return self.drop(h)


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


class Indexed(nn.Module):
    """A bias table read through an index buffer reshaped in the forward (Swin's relative
    position bias): the reshape reads the buffer before any traced value."""

    def __init__(self, n=4):
        super().__init__()
        self.table = nn.Parameter(torch.randn(2 * n - 1))
        pos = torch.arange(n)
        self.register_buffer("index", (pos[:, None] - pos[None, :] + n - 1), persistent=False)

    def forward(self, x):
        bias = self.table[self.index.view(-1)].view(x.shape[-1], x.shape[-1])
        return torch.softmax(x @ x.transpose(-2, -1) + bias, dim=-1)


class Heads(nn.Module):
    """Attention-style reshapes: the leading dims unpacked from the shape with ``*``, the
    shape's length read with ``len``."""

    def __init__(self, d=8, heads=2):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.heads = heads

    def forward(self, x):
        lead = x.shape[:-1]
        q, k, v = self.qkv(x).view(*lead, 3, self.heads, -1).unbind(-3)
        att = (q.transpose(-2, -3) @ k.transpose(-2, -3).transpose(-1, -2)).softmax(-1)
        h = (att @ v.transpose(-2, -3)).transpose(-2, -3)
        return self.out(h.reshape(*lead, -1)) * len(x.shape)


class Rows(nn.Module):
    """Iterates a tensor (its rows): the count is the batch size, which a port may not fix."""

    def __init__(self, d=4):
        super().__init__()
        self.inner = RowSum(d)
        self.head = nn.Linear(d, d)

    def forward(self, x):
        return self.head(self.inner(x))


class RowSum(nn.Module):
    def __init__(self, d=4):
        super().__init__()
        self.a = nn.Linear(d, d)

    def forward(self, x):
        return torch.stack([self.a(row) for row in x])


class NormedHeads(Heads):
    """:class:`Heads` after a batch norm: finding the shape's length must not count a batch."""

    def __init__(self, d=8, heads=2):
        super().__init__(d, heads)
        self.norm = nn.BatchNorm1d(5)

    def forward(self, x):
        return super().forward(self.norm(x))
