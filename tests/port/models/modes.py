"""Forwards that enter a mode fx does not record: no_grad, autocast."""

import torch
from torch import nn


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
