"""``Reshape``: a reshape step for graphs."""

from __future__ import annotations

import operator

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
        try:  # operator.index: numpy integers are sizes; 2.7 is not (int() would make it 2)
            dims = tuple(operator.index(s) for s in shape)
        except TypeError:
            raise TypeError(f"Reshape: the shape must hold integers, got {shape!r}") from None
        if any(d < -1 for d in dims) or dims.count(-1) > 1:
            raise ValueError(
                f"Reshape: the shape holds sizes >= 0 and at most one -1 (inferred), got {dims}"
            )
        self.shape = dims

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(self.shape)

    def extra_repr(self) -> str:
        return f"shape={self.shape}"
