"""Composed models shared by the graph-tree tests (built fresh for every test)."""

from __future__ import annotations

import torch
from torch import nn

import flodl as fl


def encoder(label: str = "encoder") -> fl.Graph:
    """A 2-Linear child: 2->4 (#hidden), _plumbing (internal by name), 4->4 (#intermediate, internal)."""
    return (
        fl.FlowBuilder(nn.Linear(2, 4))
        .tag("hidden")
        .through(nn.ReLU())
        .tag("_plumbing")
        .through(nn.Linear(4, 4))
        .tag("intermediate")
        .internal("intermediate")
        .label(label)
        .build()
    )


def composed() -> fl.Graph:
    """encoder (4 tensors) -> Linear 4->2 tagged head (2 tensors)."""
    return fl.FlowBuilder(encoder()).through(nn.Linear(4, 2)).tag("head").build()


def letter() -> fl.Graph:
    """Three levels: root -> letter -> read, each with its own Linear."""
    read = fl.FlowBuilder(nn.Linear(3, 3)).tag("hidden").label("read").build()
    mid = fl.FlowBuilder(nn.Linear(3, 3)).tag("pre").through(read).label("letter").build()
    return fl.FlowBuilder(mid).through(nn.Linear(3, 1)).tag("out").build()


def x(batch: int = 1, dim: int = 2) -> torch.Tensor:
    return torch.randn(batch, dim)
