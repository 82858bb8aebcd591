"""Resuming a launched run after ``torchrun --max-restarts`` restarted it.

Under a launcher that may restart the job (``TORCHELASTIC_MAX_RESTARTS`` > 0), rank 0 writes,
next to every checkpoint's model file (:class:`SaveFdl`: Builder mode's ``checkpoint_every``,
Graph mode's ``model.epochs(n, checkpoint_every=k)``), a small training-state file: the version
(epochs done), the step the scheduler stands at when that many epochs are done, rank 0's
optimizer state and the job's token. The token is fresh for each job (attempt 0 writes it to
``<directory>/resume-token``), so a restart never picks up the checkpoints of an earlier job that
used the same directory. On a restart (``TORCHELASTIC_RESTART_COUNT`` > 0) rank 0 finds the
newest version whose two files are both complete and carry the job's token; every rank then
starts from that model and optimizer state at the next epoch.

The restarted attempt may have another world size than the one that wrote the checkpoint (an
elastic job, ``torchrun --nnodes=MIN:MAX``, that lost or gained a node). The state file records
the world it was written at, so what depends on it is carried over, not copied:

- the model and rank 0's optimizer state go to every rank of the new world (in lockstep every
  rank holds the same optimizer state, so rank 0's is every rank's);
- the learning rate: Builder mode's ``lr_scale_ratio`` scales it by ``1 + (world - 1) × ratio``;
  the saved rate is brought to the new world's scale (else it would be scaled twice);
- the step: Builder mode's global step counts every rank's batches, the same at any world size.
  Graph mode's training step counts each rank's optimizer steps, whose number per epoch depends
  on the world; it is rescaled to the new world's steps per epoch (the length of the loader given
  to ``model.set_data_loader``), so a step-based scheduler stands where it would in an
  uninterrupted run at the new size. Without that loader the count per epoch is unknown: the
  step is kept, with a warning;
- the data: every rank's shard is cut afresh for the new world, so each epoch still covers the
  dataset once; El Che's batch counts and the auto-balancer's ratios are measured afresh.
"""

from __future__ import annotations

import io
import os
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from flodl.checkpoint import load_checkpoint
from flodl.checkpoint.methods import CheckpointMethods
from flodl.checkpoint.streams import open_destination
from flodl.log import get_logger
from flodl.train.checkpointing import SaveFdl

log = get_logger("flodl.train")

TOKEN_FILE = "resume-token"
_STATE = re.compile(r"checkpoint-(\d+)\.train\.pt$")


def restart_attempt() -> int:
    """Which attempt of a launched job this is: 0 first, N after N restarts (0 without a launcher)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def restarts_allowed() -> bool:
    """Whether the launcher may restart this job (``torchrun --max-restarts N``, N >= 1)."""
    return int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0) > 0


def state_path(save: SaveFdl, version: int) -> Path:
    """The training-state file that goes with ``save.path(version)``."""
    return Path(save.directory) / f"checkpoint-{version:04d}.train.pt"


def _write_atomically(path: Path, data: bytes) -> None:
    """``data`` at ``path``, complete or not at all (the checkpoint layer's atomic, fsynced write):
    a kill mid-write must never leave a torn file for the next attempt to trust."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_destination(path, compress=False) as out:
        out.write(data)


def job_token(save: SaveFdl) -> str | None:
    """This job's token: a fresh one on attempt 0 (written for later attempts, with the launcher's
    run id), else the written one.

    torchrun does not count a restart for a change of an elastic job's membership (a node joined
    ``--nnodes MIN:MAX``): its ranks start again as attempt 0, which flodl cannot tell from a new
    job. When the directory already holds a token of the same run id, a warning says that
    training starts again at epoch 0 and why."""
    path = Path(save.directory) / TOKEN_FILE
    run = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if restart_attempt() == 0:
        try:
            earlier = path.read_text().splitlines()
        except OSError:
            earlier = []
        if run and len(earlier) > 1 and earlier[1] == run:
            log.warning(
                "attempt 0 of run id %s, but %s already holds checkpoints of a job of that run "
                "id: training starts at epoch 0, and they are not resumed. torchrun restarts "
                "an elastic job as attempt 0 when a node joins it, which flodl cannot tell from "
                "a new job; only restarts after a failure (or a node lost) resume. A new job "
                "needs its own --rdzv-id",
                run,
                save.directory,
            )
        token = uuid.uuid4().hex
        _write_atomically(path, f"{token}\n{run}\n".encode())
        return token
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    return (lines[0].strip() or None) if lines else None


@dataclass
class ResumePoint:
    """Where a restarted run starts: after ``version`` epochs, from these files."""

    version: int
    global_step: int
    model_path: str
    optimizer: dict[str, Any] | None
    world: int | None = None  # the world size that wrote it (None: not recorded)
    lr_scale: float | None = None  # the rate multiplier the saved optimizer's rates include
    steps_per_epoch: int | None = None  # Graph mode: each rank's steps per epoch, when known


def write_state(
    save: SaveFdl,
    version: int,
    global_step: int,
    optimizer: Any,
    token: str,
    *,
    world: int,
    lr_scale: float = 1.0,
    steps_per_epoch: int | None = None,
) -> None:
    """The training state of checkpoint ``version``, next to its model file (atomic).

    Synchronous: ``torch.save`` serialises the optimizer's live tensors now, at this version.
    """
    state = {
        "version": version,
        "global_step": global_step,
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "token": token,
        "world": world,
        "lr_scale": lr_scale,
        "steps_per_epoch": steps_per_epoch,
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    _write_atomically(state_path(save, version), buffer.getvalue())


class ResumableCheckpoint:
    """``checkpoint_every``'s writer plus the training state a restart resumes from (rank 0).

    ``worker`` is the rank's :class:`~flodl.train.worker.Worker`: its optimizer state is saved
    with the model, and the global step at which ``version`` epochs are done.
    """

    def __init__(self, save: SaveFdl, worker: Any, token: str) -> None:
        self.inner, self.worker, self.token = save, worker, token

    def __call__(self, version: int, model: torch.nn.Module) -> None:
        self.inner(version, model)
        worker = self.worker
        per_epoch = worker.dataset_size // worker.batch_size  # every rank's batches of an epoch
        if worker.max_batches is not None:  # a smoke run's shorter epochs
            per_epoch = min(per_epoch, worker.max_batches * worker.world)
        # Where the scheduler stands when epoch `version` starts in an uninterrupted run.
        write_state(
            self.inner,
            version,
            version * per_epoch,
            worker.optimizer,
            self.token,
            world=worker.world,
            lr_scale=worker.local.lr_scale,
        )


def find_resume(save: SaveFdl, token: str | None, epochs: int) -> ResumePoint | None:
    """The newest complete checkpoint of this job with epochs left to train, if any."""
    if token is None:
        return None
    directory = Path(save.directory)
    found = []
    for path in directory.glob("checkpoint-*.train.pt") if directory.is_dir() else []:
        match = _STATE.search(path.name)
        if match is not None and int(match.group(1)) < epochs:
            found.append((int(match.group(1)), path))
    for version, path in sorted(found, reverse=True):
        model_path = save.path(version)
        if not model_path.is_file():  # killed before the background write finished
            continue
        try:
            state = torch.load(path, weights_only=True)
        except Exception as err:
            log.warning("cannot read %s (%s): trying an older checkpoint", path, err)
            continue
        if state.get("token") != token:
            continue  # an earlier job's file in the same directory
        return ResumePoint(
            version,
            int(state["global_step"]),
            str(model_path),
            state.get("optimizer"),
            _optional(state.get("world"), int),
            _optional(state.get("lr_scale"), float),
            _optional(state.get("steps_per_epoch"), int),
        )
    return None


def _optional(value: Any, kind: Callable[[Any], Any]) -> Any:
    return None if value is None else kind(value)


def resume_point(save: SaveFdl, token: str | None, epochs: int) -> ResumePoint | None:
    """Rank 0 of a restarted attempt: :func:`find_resume`, and a warning saying what happens
    (training goes on from that checkpoint, or starts again at epoch 0)."""
    point = find_resume(save, token, epochs)
    if point is None:
        log.warning(
            "restart %d: no complete checkpoint of this job in %s — training starts again at "
            "epoch 0",
            restart_attempt(),
            save.directory,
        )
    else:
        log.warning(
            "restart %d: resuming from %s (epoch %d of %d, step %d%s)",
            restart_attempt(),
            point.model_path,
            point.version,
            epochs,
            point.global_step,
            f", written by a world of {point.world}" if point.world is not None else "",
        )
    return point


def rescale_lr(optimizer: torch.optim.Optimizer, point: ResumePoint, lr_scale: float) -> None:
    """After ``optimizer.load_state_dict(point.optimizer)`` in a run without a scheduler: the
    saved rates include the scale of the world that wrote them; bring them to ``lr_scale``, this
    run's (a scheduler sets the rates itself at every step)."""
    if point.lr_scale is None or point.lr_scale == lr_scale:
        return
    for group in optimizer.param_groups:
        group["lr"] = float(group["lr"]) * lr_scale / point.lr_scale


def load_model(model: torch.nn.Module, path: str) -> None:
    """Load a checkpoint written by :class:`SaveFdl` into ``model`` (same architecture)."""
    if isinstance(model, CheckpointMethods):
        model.load_checkpoint(path)
    elif callable(load := getattr(model, "load_checkpoint", None)):
        load(path)  # the model saved itself (SaveFdl called its save_checkpoint)
    else:
        load_checkpoint(path, list(model.named_parameters()), list(model.named_buffers()))
