"""What ranks and the coordinator say to each other (plain data, no transport).

Coordinator -> worker: :class:`StartEpoch`, :class:`SyncNow`, :class:`RequestParams`,
:class:`Update`, :class:`Throttle`, :class:`SetGlobalStep`, :class:`Checkpoint`, :class:`Shutdown`.
Worker -> coordinator: :class:`BatchTiming`, :class:`SyncAck`, :class:`Exiting`,
:class:`~flodl.train.metrics.MetricsMsg`, :class:`Snapshot`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import torch


class ApplyPolicy(enum.Enum):
    """When replicas are averaged.

    - ``SYNC``: as soon as every rank has run one batch (lockstep).
    - ``CADENCE``: when the slowest rank has spent ``anchor`` batches' worth of wall time (El Che).
    - ``ASYNC``: when every rank has run its El Che batch count; fast ranks may overshoot.
    """

    SYNC = "sync"
    CADENCE = "cadence"
    ASYNC = "async"


class AverageBackend(enum.Enum):
    """How replicas are averaged.

    - ``NCCL``: an in-place collective all-reduce of the parameters (NCCL on GPUs, gloo on CPUs).
    - ``CPU``: ranks send snapshots to rank 0, which averages them (batch-weighted) and sends the
      result back; non-blocking for the fast ranks.
    """

    NCCL = "nccl"
    CPU = "cpu"


@dataclass(frozen=True)
class EpochPlan:
    """Train on ``perm(epoch)[offset : offset + size]``."""

    epoch: int
    offset: int
    size: int


@dataclass(frozen=True)
class StartEpoch:
    plan: EpochPlan


@dataclass(frozen=True)
class SyncNow:
    version: int


@dataclass(frozen=True)
class RequestParams:
    round: int


@dataclass(frozen=True)
class Update:
    version: int
    params: list[torch.Tensor]
    buffers: list[torch.Tensor]


@dataclass(frozen=True)
class Throttle:
    pass


@dataclass(frozen=True)
class SetGlobalStep:
    """Batches trained by every rank together, as of an averaging: ``step`` is their sum and
    ``counted[r]`` rank r's step counter it includes (empty: everything the receiver ran so far)."""

    step: int
    counted: tuple[int, ...] = ()


@dataclass(frozen=True)
class Checkpoint:
    version: int


@dataclass(frozen=True)
class Shutdown:
    pass


ControlMsg = (
    StartEpoch | SyncNow | RequestParams | Update | Throttle | SetGlobalStep | Checkpoint | Shutdown
)


@dataclass(frozen=True)
class BatchTiming:
    """One trained batch: its compute wall time, the rank's step counter and the loss."""

    rank: int
    batch_ms: float
    step_count: int
    loss: float = 0.0


@dataclass(frozen=True)
class SyncAck:
    """A rank finished collective averaging ``version`` (it is not a training batch)."""

    rank: int
    version: int
    step_count: int
    divergence: float | None = None
    sync_ms: float = 0.0


@dataclass(frozen=True)
class Exiting:
    """A rank is done (``error``: why it failed). ``events``: the timeline events it emitted
    since its last epoch report, when it forwards them (``{"wall", "kind", "rank", "data"}``)."""

    rank: int
    error: str | None = None
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Snapshot:
    """A rank's parameters and buffers for CPU averaging round ``round`` (or the final state)."""

    rank: int
    round: int
    params: list[torch.Tensor]
    buffers: list[torch.Tensor]
    batch_count: int = 1
    extra: dict[str, float] = field(default_factory=dict)
