"""Averaging replicas: batch-weighted parameters, equal-weight buffers, divergence."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch

from flodl.train.errors import TrainerConfigError
from flodl.train.trained_state import TrainedState

if TYPE_CHECKING:
    from flodl.train.messages import Snapshot


def weighted_average(
    states: Sequence[Sequence[torch.Tensor]], weights: Sequence[float]
) -> list[torch.Tensor]:
    """Element-wise ``Σ w_i · t_i / Σ w_i`` over replicas (float tensors; others taken from replica 0).

    >>> weighted_average([[torch.tensor([1.0])], [torch.tensor([5.0])]], [1, 3])
    [tensor([4.])]
    """
    if not states:
        raise TrainerConfigError("nothing to average: no replica states")
    lengths = {len(s) for s in states}
    if len(lengths) != 1:
        raise TrainerConfigError(f"replicas disagree on the number of tensors: {sorted(lengths)}")
    total = float(sum(weights))
    if total <= 0:
        raise TrainerConfigError(f"averaging weights must sum to > 0, got {list(weights)}")
    out = []
    for tensors in zip(*states, strict=True):
        first = tensors[0]
        if not first.is_floating_point():
            out.append(first.clone())  # e.g. BatchNorm's num_batches_tracked
            continue
        acc = torch.zeros_like(
            first, dtype=torch.float64 if first.dtype == torch.float64 else torch.float32
        )
        for t, w in zip(tensors, weights, strict=True):
            acc.add_(t.to(acc.dtype), alpha=w / total)
        out.append(acc.to(first.dtype))
    return out


def average_snapshots(
    params: Sequence[Sequence[torch.Tensor]],
    buffers: Sequence[Sequence[torch.Tensor]],
    batch_counts: Sequence[int],
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Parameters weighted by batches trained since the last average (min 1); buffers equally."""
    weights = [max(c, 1) for c in batch_counts]
    avg_params = weighted_average(params, weights)
    avg_buffers = weighted_average(buffers, [1] * len(buffers)) if buffers and buffers[0] else []
    return avg_params, avg_buffers


def relative_divergence(
    replica: Sequence[torch.Tensor], reference: Sequence[torch.Tensor]
) -> float:
    """``‖replica − reference‖ / ‖reference‖`` over all tensors (0 when the reference is ~0)."""
    diff = 0.0
    norm = 0.0
    for a, b in zip(replica, reference, strict=True):
        if not b.is_floating_point():
            continue
        diff += float((a.double() - b.double()).pow(2).sum())
        norm += float(b.double().pow(2).sum())
    return 0.0 if norm < 1e-20 else (diff / norm) ** 0.5


def final_state(finals: Mapping[int, Snapshot]) -> TrainedState | None:
    """The run's result from the ranks' final snapshots (rank -> snapshot): the batch-weighted
    average of whichever ranks delivered one (a lone survivor's state verbatim); None if none did.

    >>> from flodl.train.messages import Snapshot
    >>> s = final_state({0: Snapshot(0, -1, [torch.tensor([2.0])], []),
    ...                  1: Snapshot(1, -1, [torch.tensor([4.0])], [])})
    >>> s.params
    [tensor([3.])]
    """
    if not finals:
        return None
    snaps = [finals[r] for r in sorted(finals)]
    params, buffers = average_snapshots(
        [s.params for s in snaps], [s.buffers for s in snaps], [s.batch_count for s in snaps]
    )
    return TrainedState(params, buffers)
