"""Per-epoch metrics: what ranks report, and how rank 0 folds them into one :class:`EpochMetrics`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class MetricsMsg:
    """One rank's report for one epoch (or one chunk of it, under progressive dispatch)."""

    rank: int
    epoch: int
    avg_loss: float
    batches: int
    epoch_ms: float
    samples: int
    scalars: dict[str, tuple[float, int]] = field(default_factory=dict)  # name -> (sum, count)
    device_index: int = 0
    # The rank's resources when it sent this (``ResourceSample.to_json()``), if a monitor wants them.
    resources: dict[str, Any] = field(default_factory=dict)
    idle_ms: float = 0.0  # waiting (for work, an averaging, a throttle) since the last report
    wall_ms: float = 0.0  # wall time since the last report (idle_ms is part of it)
    # Timeline events this rank's process emitted since its last report (when forwarding).
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class RankEvents:
    """Timeline events ranks emitted after their last epoch report (the last checkpoint, the
    shutdown), published to the training process once the ranks have exited."""

    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class EpochMetrics:
    """Aggregated metrics of one global epoch (what the handle yields and the monitor logs)."""

    epoch: int
    avg_loss: float
    epoch_ms: float
    scalars: dict[str, float]
    per_rank: list[dict[str, float]]
    per_rank_throughput: list[float]  # samples per millisecond
    per_rank_batch_share: list[float]
    device_indices: list[int]
    batch_counts: list[int] = field(default_factory=list)  # El Che counts when the epoch closed
    anchor: int = 0
    # Each rank's latest resource sample (``ResourceSample.to_json()``; empty when not sampled).
    per_rank_resources: list[dict[str, Any]] = field(default_factory=list)
    per_rank_batches: list[int] = field(default_factory=list)  # batches each rank trained
    # Each rank's wall time accounted to this epoch, and the part it spent waiting (for work,
    # for a peer at an averaging, throttled): a fast rank held back by a slow one shows here.
    per_rank_wall_ms: list[float] = field(default_factory=list)
    per_rank_idle_ms: list[float] = field(default_factory=list)
    # Timeline events the ranks forwarded with this epoch (``{"wall", "kind", "rank", "data"}``).
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def per_rank_idle_share(self) -> list[float]:
        """Fraction of each rank's time spent waiting (0 when it reported none)."""
        return [
            i / w if w > 0 else 0.0
            for i, w in zip(self.per_rank_idle_ms, self.per_rank_wall_ms, strict=True)
        ]

    def as_dict(self) -> dict[str, float]:
        """``loss`` plus every recorded scalar."""
        return {"loss": self.avg_loss, **self.scalars}

    def monitor_metrics(self) -> dict[str, float]:
        """What a monitor logs: :meth:`as_dict`, each rank's samples/s and share of the epoch, and
        (several ranks) El Che's batch counts and anchor, so the cadence is visible per epoch.

        >>> m = EpochMetrics(3, 0.5, 100.0, {}, [{}, {}], [2.0, 1.0], [0.6, 0.4], [0, 1], [20, 10], 10)
        >>> m.monitor_metrics()["rank0_samples_per_s"], m.monitor_metrics()["el_che_anchor"]
        (2000.0, 10.0)
        """
        out = self.as_dict()
        for r, (speed, share) in enumerate(
            zip(self.per_rank_throughput, self.per_rank_batch_share, strict=True)
        ):
            out[f"rank{r}_samples_per_s"] = speed * 1e3
            out[f"rank{r}_share"] = share
        if len(self.per_rank_wall_ms) > 1:  # several ranks: who waits for whom
            for r, idle in enumerate(self.per_rank_idle_share):
                out[f"rank{r}_idle"] = idle
        for r, count in enumerate(self.batch_counts):
            out[f"el_che_rank{r}_batches"] = float(count)
        if self.batch_counts:
            out["el_che_anchor"] = float(self.anchor)
        return out


def aggregate_epoch_metrics(
    epoch: int, messages: Iterable[MetricsMsg], world: int, *, epoch_ms: float | None = None
) -> EpochMetrics:
    """Fold per-rank (possibly per-chunk) messages into one epoch.

    Loss and scalars are batch-weighted across ranks; epoch time is the slowest rank's unless the
    caller measured the epoch's wall time itself (progressive dispatch).

    >>> m = aggregate_epoch_metrics(0, [MetricsMsg(0, 0, 0.5, 60, 10.0, 600),
    ...                                  MetricsMsg(1, 0, 0.7, 40, 12.0, 400)], world=2)
    >>> round(m.avg_loss, 4), m.epoch_ms, m.per_rank_batch_share
    (0.58, 12.0, [0.6, 0.4])
    """
    loss_sum = [0.0] * world
    batches = [0] * world
    ms = [0.0] * world
    samples = [0] * world
    devices = [0] * world
    sums: list[dict[str, tuple[float, int]]] = [{} for _ in range(world)]
    resources: list[dict[str, Any]] = [{} for _ in range(world)]
    idle = [0.0] * world
    wall = [0.0] * world
    events: list[dict[str, Any]] = []
    for msg in messages:
        r = msg.rank
        events += msg.events
        if msg.resources:
            resources[r] = msg.resources
        idle[r] += msg.idle_ms
        wall[r] += msg.wall_ms
        loss_sum[r] += msg.avg_loss * msg.batches
        batches[r] += msg.batches
        ms[r] = max(ms[r], msg.epoch_ms)
        samples[r] += msg.samples
        devices[r] = msg.device_index
        for name, (total, count) in msg.scalars.items():
            s, c = sums[r].get(name, (0.0, 0))
            sums[r][name] = (s + total, c + count)
    total_batches = sum(batches)
    total_samples = sum(samples)
    per_rank = [{k: s / c for k, (s, c) in rank.items() if c} for rank in sums]
    names = sorted({k for rank in per_rank for k in rank})
    scalars = {}
    for name in names:
        weight = sum(batches[r] for r in range(world) if name in per_rank[r])
        if weight:
            scalars[name] = (
                sum(per_rank[r][name] * batches[r] for r in range(world) if name in per_rank[r])
                / weight
            )
        else:
            values = [per_rank[r][name] for r in range(world) if name in per_rank[r]]
            scalars[name] = sum(values) / len(values)
    return EpochMetrics(
        epoch=epoch,
        avg_loss=sum(loss_sum) / total_batches if total_batches else 0.0,
        epoch_ms=max(ms) if epoch_ms is None else epoch_ms,
        scalars=scalars,
        per_rank=per_rank,
        per_rank_throughput=[s / m if m > 0 else 0.0 for s, m in zip(samples, ms, strict=True)],
        per_rank_batch_share=[s / total_samples if total_samples else 0.0 for s in samples],
        device_indices=devices,
        per_rank_resources=resources,
        per_rank_batches=batches,
        per_rank_wall_ms=wall,
        per_rank_idle_ms=idle,
        events=sorted(events, key=lambda e: e["wall"]),
    )
