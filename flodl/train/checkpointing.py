"""The Trainer's default checkpoint: the model's tensors in a ``.fdl`` file per version."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from flodl.checkpoint import save_checkpoint


@dataclass(frozen=True)
class SaveFdl:
    """Write ``<directory>/checkpoint-<version>.fdl`` atomically (picklable: it crosses to ranks).

    A Graph's file carries its structural hash, so ``graph.load_checkpoint`` checks the
    architecture; any other module's file loads with ``fl.load_checkpoint``.
    """

    directory: str = "checkpoints"

    def path(self, version: int) -> Path:
        return Path(self.directory) / f"checkpoint-{version:04d}.fdl"

    def __call__(self, version: int, model: torch.nn.Module) -> None:
        dest = self.path(version)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if hasattr(model, "save_checkpoint"):
            model.save_checkpoint(dest)
        else:
            save_checkpoint(dest, list(model.named_parameters()), list(model.named_buffers()))
