"""``StateAdd``: the built-in recurrent cell for forward references."""

from __future__ import annotations

import torch
from torch import nn


class StateAdd(nn.Module):
    """``x`` alone, or ``x + Σ refs`` when wired with ``.using(...)`` (a tag group's list of
    values counts each member).

    The typical pattern ``.through(fl.nn.StateAdd()).using("memory").tag("memory")`` keeps a
    running memory across calls: ``memory_t = x_t + memory_{t-1}`` (zeros on the first call).

    >>> import torch
    >>> import flodl as fl
    >>> fl.nn.StateAdd().forward_named(torch.ones(2), {"a": torch.ones(2)})
    tensor([2., 2.])
    """

    node_name = "state_add"

    def forward(self, x: torch.Tensor, *refs: torch.Tensor | list[torch.Tensor]) -> torch.Tensor:
        for ref in refs:
            # a tuple of types: torch.compile before 2.10 breaks on a union
            for value in ref if isinstance(ref, (list, tuple)) else (ref,):
                x = x + value
        return x

    def forward_named(self, x: torch.Tensor, refs: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.forward(x, *refs.values())
