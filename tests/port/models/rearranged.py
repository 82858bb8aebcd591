"""einops in a forward (as in the widely copied ViT code) and loops over a tensor's pieces."""

import einops
import torch
from einops import rearrange, repeat
from einops.layers.torch import Rearrange
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim, heads=2, dim_head=4):
        super().__init__()
        inner = heads * dim_head
        self.heads = heads
        self.scale = dim_head**-0.5
        self.norm = nn.LayerNorm(dim)
        self.to_qkv = nn.Linear(dim, inner * 3, bias=False)
        self.to_out = nn.Linear(inner, dim)

    def forward(self, x):
        qkv = self.to_qkv(self.norm(x)).chunk(3, dim=-1)
        q, k, v = map(lambda t: rearrange(t, "b n (h d) -> b h n d", h=self.heads), qkv)  # noqa: C417 (as copied)
        attn = (torch.matmul(q, k.transpose(-1, -2)) * self.scale).softmax(dim=-1)
        return self.to_out(rearrange(torch.matmul(attn, v), "b h n d -> b n (h d)"))


class TinyViT(nn.Module):
    """Patches by an einops layer, a class token by ``repeat``, attention by ``rearrange``."""

    def __init__(self, size=8, patch=4, dim=8, classes=3):
        super().__init__()
        patches = (size // patch) ** 2
        self.to_patch = nn.Sequential(
            Rearrange("b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=patch, p2=patch),
            nn.Linear(3 * patch * patch, dim),
        )
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, patches + 1, dim))
        self.attn = Attention(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, img):
        x = self.to_patch(img)
        cls = repeat(self.cls_token, "1 1 d -> b 1 d", b=x.shape[0])
        x = torch.cat((cls, x), dim=1) + self.pos
        x = self.attn(x) + x
        return self.head(einops.reduce(x, "b n d -> b d", "mean"))


class PerStep(nn.Module):
    """A layer on each step of a sequence, its pieces from ``unbind``."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return torch.stack([torch.tanh(self.fc(t)) for t in x.unbind(1)], dim=1)


class Halves(nn.Module):
    """A sum over a tensor's pieces from ``torch.chunk``, in a loop."""

    def __init__(self, dim=6):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        total = 0
        for piece in torch.chunk(self.fc(x), 2, dim=-1):
            total = total + piece.sigmoid()
        return total
