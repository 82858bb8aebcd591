"""``Select``: take one element of a tuple output (``nn.LSTM``, ``nn.MultiheadAttention``)."""

from __future__ import annotations

from typing import Any

from torch import nn


class Select(nn.Module):
    """``x[index]``: the step that picks one element of a tuple-returning module's output.

    ``nn.LSTM`` returns ``(output, (h, c))`` and ``nn.MultiheadAttention`` returns
    ``(output, weights)``; ``.through(fl.nn.Select(0))`` keeps the first element. Unlike a
    ``lambda t: t[0]`` step, a graph using ``Select`` pickles and ``torch.save``\\ s. ``index`` is
    anything ``x[index]`` accepts that pickles: an int (negative counts from the end) or a slice; to go
    down nested tuples, chain two steps (``Select(1)`` then ``Select(0)`` is ``x[1][0]``, the
    final ``h`` of an ``nn.LSTM``).

    >>> import torch
    >>> import flodl as fl
    >>> from torch import nn
    >>> lstm = (fl.FlowBuilder(nn.LSTM(3, 5, batch_first=True))
    ...         .through(fl.nn.Select(0))            # (output, (h, c)) -> output
    ...         .build())
    >>> lstm(torch.randn(2, 7, 3)).shape
    torch.Size([2, 7, 5])
    """

    node_name = "select"

    def __init__(self, index: Any) -> None:
        super().__init__()
        self.index = index

    def forward(self, x: Any) -> Any:
        return x[self.index]

    def extra_repr(self) -> str:
        return f"index={self.index!r}"
