"""What a training run returns, and how it fails."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from flodl.errors import FlodlError
from flodl.train.errors import TrainingError as TrainingError  # defined there; importable here


@dataclass
class TrainedState:
    """Averaged parameters and buffers (CPU tensors, in ``model.parameters()`` / ``buffers()`` order)."""

    params: list[torch.Tensor]
    buffers: list[torch.Tensor] = field(default_factory=list)

    def load_into(self, model: torch.nn.Module) -> torch.nn.Module:
        """Copy this state into ``model`` (same architecture) and return it."""
        params, buffers = list(model.parameters()), list(model.buffers())
        if len(params) != len(self.params) or len(buffers) != len(self.buffers):
            raise FlodlError(
                f"the trained state has {len(self.params)} parameters and {len(self.buffers)} buffers, "
                f"the model {len(params)} and {len(buffers)} — build the model with the same factory"
            )
        with torch.no_grad():
            for mine, new in zip([*params, *buffers], [*self.params, *self.buffers], strict=True):
                mine.copy_(new.to(mine.device))
        return model
