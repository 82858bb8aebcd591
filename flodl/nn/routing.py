"""Routers (soft weights for ``gate``) and selectors (branch indices for ``switch``).

Routers return weights of shape ``[..., n]`` (one per expert). Selectors return either one
index per sample (shape ``[B]``, the batch is routed sample by sample) or a single index (the
whole batch goes to one branch).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn


def _sum_refs(
    x: torch.Tensor, refs: Mapping[str, torch.Tensor | list[torch.Tensor]]
) -> torch.Tensor:
    """``x + Σ refs``; a tag group's list of values counts each member."""
    for ref in refs.values():
        # a tuple of types: torch.compile before 2.10 breaks on a union
        for value in ref if isinstance(ref, (list, tuple)) else (ref,):
            x = x + value
    return x


class SoftmaxRouter(nn.Module):
    """``softmax(Linear(input_dim -> n_experts)(x), -1)``: weights that sum to 1 per sample.

    Refs wired with ``.using(...)`` are added to the input before the projection.

    >>> import torch
    >>> import flodl as fl
    >>> weights = fl.nn.SoftmaxRouter(4, 3)(torch.randn(2, 4))
    >>> weights.shape, torch.allclose(weights.sum(-1), torch.ones(2))
    (torch.Size([2, 3]), True)
    """

    node_name = "softmax_router"

    def __init__(self, input_dim: int, n_experts: int) -> None:
        super().__init__()
        self.proj = nn.Linear(input_dim, n_experts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.proj(x), dim=-1)

    def forward_named(self, x: torch.Tensor, refs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.forward(_sum_refs(x, refs))


class SigmoidRouter(nn.Module):
    """``sigmoid(Linear(input_dim -> n_experts)(x))``: an independent gate in (0, 1) per expert."""

    node_name = "sigmoid_router"

    def __init__(self, input_dim: int, n_experts: int) -> None:
        super().__init__()
        self.proj = nn.Linear(input_dim, n_experts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.proj(x))

    def forward_named(self, x: torch.Tensor, refs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.forward(_sum_refs(x, refs))


class ArgmaxSelector(nn.Module):
    """Pick a branch per sample: ``argmax(Linear(input_dim -> n_branches)(x), -1)``.

    Returns a ``[B]`` long tensor for ``[B, input_dim]`` input (a 0-d tensor for 1-d input).
    The choice is not differentiable, so the projection gets no gradient through a switch;
    train it with an auxiliary loss (or a policy gradient) if it must learn.

    >>> import torch
    >>> import flodl as fl
    >>> fl.nn.ArgmaxSelector(4, 3)(torch.randn(5, 4)).shape
    torch.Size([5])
    """

    node_name = "argmax_selector"

    def __init__(self, input_dim: int, n_branches: int) -> None:
        super().__init__()
        self.proj = nn.Linear(input_dim, n_branches)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).argmax(dim=-1)

    def forward_named(self, x: torch.Tensor, refs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.forward(_sum_refs(x, refs))


class FixedSelector(nn.Module):
    """Always select branch ``index`` (for the whole batch)."""

    node_name = "fixed_selector"

    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = int(index)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tensor(self.index, device=x.device)

    def extra_repr(self) -> str:
        return f"index={self.index}"
