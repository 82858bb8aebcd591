"""Random data flows of linear layers joined by +, - and * (generated, kept as written): the
ports of these differed in the last bits before layouts kept the original's order of
operations. Some values are computed and never read, as the generator wrote them."""

# ruff: noqa: F841

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
