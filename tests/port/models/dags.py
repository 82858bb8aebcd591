"""Random data flows of linear layers joined by +, - and * (generated, kept as written): the
ports of these differed in the last bits before layouts kept the original's order of
operations. Some values are computed and never read, as the generator wrote them."""

# ruff: noqa: F841

import torch
from torch import nn


class Dag0(nn.Module):
    def __init__(self, d=3):
        super().__init__()
        self.l0 = nn.Linear(d, d)
        self.l1 = nn.Linear(d, d)
        self.l2 = nn.Linear(d, d)
        self.l3 = nn.Linear(d, d)
        self.l4 = nn.Linear(d, d)
        self.l5 = nn.Linear(d, d)
        self.l6 = nn.Linear(d, d)
        self.l7 = nn.Linear(d, d)

    def forward(self, x):
        v0 = x
        v1 = self.l0(v0) - v0
        v2 = self.l1(v1) * v1
        v3 = self.l2(v2) - v0
        v4 = self.l3(v2)
        v5 = self.l4(v0)
        v6 = (self.l5(v2) - v4) + v5
        v7 = self.l6(v0) + v5
        v8 = self.l7(v7) * v1
        return v7 + v8


class Dag1(nn.Module):
    def __init__(self, d=3):
        super().__init__()
        self.l0 = nn.Linear(d, d)
        self.l1 = nn.Linear(d, d)
        self.l2 = nn.Linear(d, d)
        self.l3 = nn.Linear(d, d)
        self.l4 = nn.Linear(d, d)
        self.l5 = nn.Linear(d, d)

    def forward(self, x):
        v0 = x
        v1 = (self.l0(v0) * v0) * v0
        v2 = self.l1(v1) + v0
        v3 = self.l2(v0) * v1
        v4 = (self.l3(v0) - v3) + v2
        v5 = (self.l4(v0) + v2) + v0
        v6 = (self.l5(v0) + v3) * v5
        return v5 + v6


class Dag9(nn.Module):
    def __init__(self, d=3):
        super().__init__()
        self.l0 = nn.Linear(d, d)
        self.l1 = nn.Linear(d, d)
        self.l2 = nn.Linear(d, d)
        self.l3 = nn.Linear(d, d)
        self.l4 = nn.Linear(d, d)
        self.l5 = nn.Linear(d, d)
        self.l6 = nn.Linear(d, d)
        self.l7 = nn.Linear(d, d)

    def forward(self, x):
        v0 = x
        v1 = (self.l0(v0) + v0) - v0
        v2 = self.l1(v1)
        v3 = (self.l2(v1) * v2) - v0
        v4 = (self.l3(v0) - v3) * v1
        v5 = self.l4(v1) + v1
        v6 = self.l5(v0)
        v7 = self.l6(v4)
        v8 = (self.l7(v1) * v6) + v1
        return v7 + v8


class Dag13(nn.Module):
    def __init__(self, d=3):
        super().__init__()
        self.l0 = nn.Linear(d, d)
        self.l1 = nn.Linear(d, d)
        self.l2 = nn.Linear(d, d)
        self.l3 = nn.Linear(d, d)
        self.l4 = nn.Linear(d, d)
        self.l5 = nn.Linear(d, d)
        self.l6 = nn.Linear(d, d)

    def forward(self, x):
        v0 = x
        v1 = self.l0(v0) - v0
        v2 = self.l1(v0)
        v3 = self.l2(v0)
        v4 = self.l3(v1)
        v5 = self.l4(v0) + v3
        v6 = (self.l5(v0) + v2) * v1
        v7 = self.l6(v5) + v3
        return v6 + v7


class Dag14(nn.Module):
    def __init__(self, d=3):
        super().__init__()
        self.l0 = nn.Linear(d, d)
        self.l1 = nn.Linear(d, d)
        self.l2 = nn.Linear(d, d)
        self.l3 = nn.Linear(d, d)
        self.l4 = nn.Linear(d, d)

    def forward(self, x):
        v0 = x
        v1 = (self.l0(v0) * v0) - v0
        v2 = self.l1(v1)
        v3 = self.l2(v1) * v2
        v4 = self.l3(v0) + v2
        v5 = self.l4(v2) * v2
        return v4 + v5


class Dag27(nn.Module):
    def __init__(self, d=3):
        super().__init__()
        self.l0 = nn.Linear(d, d)
        self.l1 = nn.Linear(d, d)
        self.l2 = nn.Linear(d, d)
        self.l3 = nn.Linear(d, d)
        self.l4 = nn.Linear(d, d)
        self.l5 = nn.Linear(d, d)
        self.l6 = nn.Linear(d, d)
        self.l7 = nn.Linear(d, d)

    def forward(self, x):
        v0 = x
        v1 = self.l0(v0) + v0
        v2 = self.l1(v1)
        v3 = (self.l2(v1) * v1) + v1
        v4 = self.l3(v1)
        v5 = self.l4(v0) - v4
        v6 = self.l5(v4)
        v7 = self.l6(v6) - v3
        v8 = self.l7(v7)
        return v7 + v8


class Dag35(nn.Module):
    def __init__(self, d=3):
        super().__init__()
        self.l0 = nn.Linear(d, d)
        self.l1 = nn.Linear(d, d)
        self.l2 = nn.Linear(d, d)
        self.l3 = nn.Linear(d, d)
        self.l4 = nn.Linear(d, d)
        self.l5 = nn.Linear(d, d)
        self.l6 = nn.Linear(d, d)
        self.l7 = nn.Linear(d, d)
        self.l8 = nn.Linear(d, d)

    def forward(self, x):
        v0 = x
        v1 = self.l0(v0) + v0
        v2 = self.l1(v1) - v1
        v3 = self.l2(v2)
        v4 = (self.l3(v2) * v2) + v0
        v5 = (self.l4(v0) * v0) - v3
        v6 = self.l5(v2)
        v7 = self.l6(v0) + v0
        v8 = self.l7(v1) * v2
        v9 = self.l8(v1)
        return v8 + v9


class Writes79(nn.Module):
    """port_random.py seed 79: unread in-place writes (kept as effects), whose fx names
    (add__2) once became a tag spelt as a node id (add_2)."""

    def __init__(self, d=3):
        super().__init__()
        self.l2 = nn.Linear(d, d)
        self.q5 = nn.Linear(d, 2 * d)

    def forward(self, x):
        v0 = x
        t0 = v0 * 1.5
        t0.add_(v0)
        v1 = t0
        v2 = v1 - v0
        self.l2(v0)
        t3 = v2 * 1.5
        t3.add_(v1)
        v4 = t3
        t4 = v2 * 1.5
        t4.add_(v4)
        h5, g5 = self.q5(v0).chunk(2, dim=1)
        return h5 * torch.sigmoid(g5)
