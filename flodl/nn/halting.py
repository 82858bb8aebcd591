"""Halting conditions for ``loop_body(...).while_cond`` / ``.until_cond``.

A condition returns either one value (the whole batch halts together) or one value per sample
(shape ``[B]`` or ``[B, 1]``: each sample halts on its own). A value ``> 0`` means "halt".
"""

from __future__ import annotations

import torch
from torch import nn


class ThresholdHalt(nn.Module):
    """Halt a sample once its largest element exceeds ``threshold``.

    For input with a batch dimension (2-d or more) the result has one value per sample,
    ``max(x[i]) - threshold``; for 0-d/1-d input it is one value for the whole tensor. The
    result has the dtype ``x - threshold`` has. Empty input keeps that shape: an empty batch gives
    an empty result (nothing left to run: the loop stops), and an empty sample or an empty
    0-d/1-d tensor, which has no largest element, gives ``-inf`` (it never halts).

    >>> import torch
    >>> import flodl as fl
    >>> fl.nn.ThresholdHalt(1.0)(torch.tensor([[0.5, 2.0], [0.1, 0.2]]))
    tensor([ 1.0000, -0.8000])
    """

    node_name = "threshold_halt"

    def __init__(self, threshold: float) -> None:
        super().__init__()
        self.threshold = float(threshold)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.detach()
        if x.numel() == 0:
            # amax refuses an empty reduction; -inf is the maximum of nothing
            size = x.shape[0] if x.dim() >= 2 else 1
            dtype = torch.result_type(x, self.threshold)
            return torch.full((size,), float("-inf"), dtype=dtype, device=x.device)
        if x.dim() >= 2:
            return x.flatten(1).amax(dim=1) - self.threshold
        return x.max().reshape(1) - self.threshold

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}"


class LearnedHalt(nn.Module):
    """A learned probe ``Linear(input_dim -> 1)``: a sample halts when its output is ``> 0``.

    The loop only reads the decision, so no gradient reaches the probe through the loop; train it
    with its own loss (e.g. on ``graph.tagged(...)`` values) if it must learn when to stop.
    """

    node_name = "learned_halt"

    def __init__(self, input_dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(input_dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)
