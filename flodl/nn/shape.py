"""``Reshape``: a reshape step for graphs."""

from __future__ import annotations

import torch
from torch import nn


class Reshape(nn.Module):
    """``x.reshape(*shape)``; include the batch dimension (``-1`` infers it).

    >>> import torch
    >>> import flodl as fl
    >>> fl.nn.Reshape(-1, 2, 3)(torch.zeros(4, 6)).shape
    torch.Size([4, 2, 3])
    """

    node_name = "reshape"

    def __init__(self, *shape: int) -> None:
        super().__init__()
        if len(shape) == 1 and isinstance(shape[0], tuple | list):
            shape = tuple(shape[0])
        self.shape = tuple(int(s) for s in shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(self.shape)

    def extra_repr(self) -> str:
        return f"shape={self.shape}"
