"""Parallel branches concatenated (an Inception-style block) and a learned positional table."""

import torch
import torch.nn.functional as F
from torch import nn


class Inception(nn.Module):
    def __init__(self, cin=4, classes=5):
        super().__init__()
        self.b1 = nn.Conv2d(cin, 4, 1)
        self.b3a = nn.Conv2d(cin, 4, 1)
        self.b3b = nn.Conv2d(4, 6, 3, padding=1)
        self.pool = nn.MaxPool2d(3, stride=1, padding=1)
        self.head = nn.Linear(4 + 6 + cin, classes)

    def forward(self, x):
        y = torch.cat([self.b1(x), self.b3b(F.relu(self.b3a(x))), self.pool(x)], dim=1)
        y = F.adaptive_avg_pool2d(F.relu(y), 1).flatten(1)
        return self.head(y)


class Positional(nn.Module):
    def __init__(self, features=6, d=8, max_len=16):
        super().__init__()
        self.embed = nn.Linear(features, d)
        self.pos = nn.Parameter(torch.randn(1, max_len, d) * 0.02)
        self.out = nn.Linear(d, 2)

    def forward(self, x):
        h = self.embed(x)
        h = h + self.pos[:, : h.size(1)]
        return self.out(h.mean(dim=1))


class SelfInit(nn.Module):
    """The constructor calls a method of its own: build() must construct the class itself."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self._reset()

    def _reset(self):
        nn.init.zeros_(self.fc.bias)

    def forward(self, x):
        return torch.relu(self.fc(x))


class LoopInit(nn.Module):
    """Weight initialisation over self.modules() with a loop variable named m."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc1 = nn.Linear(dim, dim)
        self.fc2 = nn.Linear(dim, 2)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class UNet(nn.Module):
    """A skip connection concatenated back after the down- and up-sampling path."""

    def __init__(self, c=4):
        super().__init__()
        self.enc1 = nn.Conv2d(3, c, 3, padding=1)
        self.enc2 = nn.Conv2d(c, 2 * c, 3, padding=1)
        self.up = nn.ConvTranspose2d(2 * c, c, 2, stride=2)
        self.dec = nn.Conv2d(2 * c, c, 3, padding=1)
        self.out = nn.Conv2d(c, 1, 1)

    def forward(self, x):
        e1 = F.relu(self.enc1(x))
        e2 = F.relu(self.enc2(F.max_pool2d(e1, 2)))
        d = self.up(e2)
        d = F.relu(self.dec(torch.cat([d, e1], dim=1)))
        return torch.sigmoid(self.out(d)) * 2 - 1


class Deep(nn.Module):
    """Many residual blocks: a builder chain longer than one expression should hold."""

    def __init__(self, n=100, d=4):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(d, d) for _ in range(n))

    def forward(self, x):
        for blk in self.blocks:
            x = x + torch.tanh(blk(x))
        return x
