"""What a train step can ask about where it runs, and per-epoch scalars it can record.

Outside a Trainer (here, a thread no Trainer runs in) the context is rank 0 of 1:

>>> import threading
>>> from flodl.train.step_context import current, record_scalar
>>> seen = []
>>> thread = threading.Thread(target=lambda: seen.append((current().rank, current().world_size)))
>>> thread.start(); thread.join()
>>> seen
[(0, 1)]
>>> record_scalar("accuracy", 0.5)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch


@dataclass
class WorkerContext:
    """The rank running the current train step (rank 0 of 1 outside a Trainer)."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    epoch: int = 0
    local_step: int = 0
    global_step: int = 0
    lr: float = 0.0  # the optimizer's learning rate for the batch being trained
    scalars: dict[str, tuple[float, int]] = field(default_factory=dict)


_local = threading.local()


def current() -> WorkerContext:
    """The context of the calling thread's worker."""
    ctx = getattr(_local, "ctx", None)
    if ctx is None:
        ctx = _local.ctx = WorkerContext()
    return ctx


def install(ctx: WorkerContext | None) -> None:
    """Make ``ctx`` the calling thread's context (None: back to the default)."""
    _local.ctx = ctx


def installed() -> WorkerContext | None:
    """The calling thread's installed context, if any (to put back with :func:`install`)."""
    return getattr(_local, "ctx", None)


def record_scalar(name: str, value: float | torch.Tensor) -> None:
    """Add ``value`` to this epoch's mean of ``name`` (aggregated across ranks, batch-weighted)."""
    ctx = current()
    total, count = ctx.scalars.get(name, (0.0, 0))
    ctx.scalars[name] = (total + float(value), count + 1)


def drain_scalars() -> dict[str, tuple[float, int]]:
    ctx = current()
    scalars, ctx.scalars = ctx.scalars, {}
    return scalars
