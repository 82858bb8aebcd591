"""The Trainer's default checkpoint: the model's tensors in a ``.fdl`` file per version."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from flodl import checkpoint
from flodl.checkpoint import listeners, save_checkpoint
from flodl.checkpoint.methods import CheckpointMethods
from flodl.log import get_logger
from flodl.monitor import timeline

log = get_logger("flodl.train")


@dataclass(frozen=True)
class SaveFdl:
    """Write ``<directory>/checkpoint-<version>.fdl`` atomically (picklable: it crosses to ranks).

    A Graph's file carries its structural hash, so ``graph.load_checkpoint`` checks the
    architecture; any other module's file loads with ``fl.load_checkpoint``. With
    ``background`` (the default) training waits only for a CPU copy of the tensors; the file is
    written on a background thread (see ``fl.checkpoint.flush``), and the end of training waits
    for it.
    """

    directory: str = "checkpoints"
    background: bool = True

    def path(self, version: int) -> Path:
        return Path(self.directory) / f"checkpoint-{version:04d}.fdl"

    def __call__(self, version: int, model: torch.nn.Module) -> None:
        dest = self.path(version)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(model, CheckpointMethods):
            model.save_checkpoint(dest, background=self.background)
        elif callable(save := getattr(model, "save_checkpoint", None)):
            save(dest)
        else:
            params, buffers = list(model.named_parameters()), list(model.named_buffers())
            save_checkpoint(dest, params, buffers, background=self.background)
        if not self.background:
            log.info("checkpoint saved: %s (version %d)", dest, version)


def save_version(
    fn: Callable[[int, torch.nn.Module], None], version: int, model: torch.nn.Module
) -> None:
    """Run the checkpoint function for ``version``; a failure is logged and training goes on.

    Each file it writes through flodl (``SaveFdl``, ``save_checkpoint``) is labelled
    ``version`` and becomes one timeline ``checkpoint_saved`` event when it is on disk (for a
    background save: when the writer finishes). A function that wrote nothing through flodl
    gets one event when it returns (with the path when ``fn`` is a SaveFdl)."""
    try:
        with listeners.save_tags(version=version) as scope:
            fn(version, model)
    except Exception:  # a failed checkpoint must not stop training
        log.exception("checkpoint %d failed; training goes on", version)
        return
    if not scope.saves:
        fn = getattr(fn, "inner", fn)  # a SaveFdl that also writes a restart's training state
        path = str(fn.path(version)) if isinstance(fn, SaveFdl) else None
        timeline.emit("checkpoint_saved", version=version, path=path)


def flush_checkpoints() -> None:
    """Wait for the background checkpoint writes of this process. A failure is not raised: a
    checkpoint failure never fails a training run (the Trainer's contract), and the writer
    already logged it, naming its file and version, when it happened."""
    try:
        checkpoint.flush()
    except Exception as err:
        log.debug("background checkpoint failures were logged when they happened: %s", err)
