"""Forwards that enter a mode fx does not record (no_grad, autocast), or checkpoint."""

import functools

import torch
import torch.utils.checkpoint
from torch import nn
from torch.utils.checkpoint import checkpoint


class Teacher(nn.Module):
    """A frozen target computed without gradients (BYOL, distillation)."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        with torch.no_grad():
            return self.fc(x)


class Frozen(nn.Module):
    """The same, by a decorated forward."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    @torch.no_grad()
    def forward(self, x):
        return self.fc(x).relu()


class FullPrecision(nn.Module):
    """A part kept in float32 under autocast, as diffusion and transformers code does."""

    def __init__(self, dim=4):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        with torch.autocast("cpu", enabled=False):
            return self.fc(x.float()).softmax(-1)


class Distilled(nn.Module):
    """A student learning against a teacher, a frozen branch and a float32 part."""

    def __init__(self, dim=4):
        super().__init__()
        self.student = nn.Linear(dim, dim)
        self.teacher = Teacher(dim)
        self.frozen = Frozen(dim)
        self.precise = FullPrecision(dim)

    def forward(self, x):
        h = self.student(x)
        return self.precise(h) - self.teacher(x) + self.frozen(x)


class Student(nn.Module):
    """The model's own forward enters no_grad."""

    def __init__(self, dim=4):
        super().__init__()
        self.online = nn.Linear(dim, dim)
        self.target = nn.Linear(dim, dim)

    def forward(self, x):
        with torch.no_grad():
            t = self.target(x)
        return self.online(x) - t


class Stack(nn.Module):
    """Blocks checkpointed in training through a partial kept on the instance (transformers'
    ``_gradient_checkpointing_func``)."""

    def __init__(self, dim=4):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(dim, dim), nn.Linear(dim, dim)])
        self.checkpointed = functools.partial(checkpoint, use_reentrant=False)

    def forward(self, x):
        for block in self.blocks:
            x = self.checkpointed(block, x) if self.training else block(x)
        return x


class Recomputed(nn.Module):
    """A stack checkpointed as a whole by the model, through torch.utils.checkpoint."""

    def __init__(self, dim=4):
        super().__init__()
        self.stack = Stack(dim)
        self.head = nn.Linear(dim, 2)

    def forward(self, x):
        return self.head(torch.utils.checkpoint.checkpoint(self.stack, x, use_reentrant=False))


class Averaged(nn.Module):
    """A target network moved toward the online one in the forward (BYOL, MoCo's momentum
    encoder): a write into parameters the forward reaches through ``parameters()``, which fx
    does not record."""

    def __init__(self, dim=4, momentum=0.9):
        super().__init__()
        self.online = nn.Linear(dim, dim)
        self.target = nn.Linear(dim, dim)
        self.momentum = momentum

    def forward(self, x):
        with torch.no_grad():
            for t, o in zip(self.target.parameters(), self.online.parameters(), strict=True):
                t.mul_(self.momentum).add_(o, alpha=1 - self.momentum)
            target = self.target(x)
        return self.online(x) - target
