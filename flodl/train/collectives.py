"""Collectives of Graph mode: gradient averaging, rank 0's values to every rank, weighted means.

Every collective goes through :func:`_flat_collective`: tensors flattened into buckets of one
dtype and device (at most ``BUCKET_BYTES`` each), one call per bucket, results copied back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from flodl.train.errors import TrainerConfigError

BUCKET_BYTES = 25 * 1024 * 1024  # like DistributedDataParallel's default bucket cap


def _buckets(tensors: Sequence[torch.Tensor]) -> list[list[int]]:
    """Indices of ``tensors`` grouped by (dtype, device), each group cut at BUCKET_BYTES."""
    groups: dict[tuple[torch.dtype, torch.device], list[list[int]]] = {}
    sizes: dict[tuple[torch.dtype, torch.device], int] = {}
    for i, t in enumerate(tensors):
        key = (t.dtype, t.device)
        nbytes = t.numel() * t.element_size()
        if key not in groups or sizes[key] + nbytes > BUCKET_BYTES:
            groups.setdefault(key, []).append([])
            sizes[key] = 0
        groups[key][-1].append(i)
        sizes[key] += nbytes
    return [b for bs in groups.values() for b in bs if b]


def _flat_collective(tensors: Sequence[torch.Tensor], op: Callable[[torch.Tensor], Any]) -> None:
    """Run ``op`` on each bucket flattened into one tensor, then copy the result back in place."""
    for bucket in _buckets(tensors):
        parts = [tensors[i] for i in bucket]
        flat = torch.cat([t.reshape(-1) for t in parts])
        op(flat)
        for t, chunk in zip(parts, flat.split([t.numel() for t in parts]), strict=True):
            t.copy_(chunk.view_as(t))


def broadcast_from_rank_zero(tensors: list[torch.Tensor], group: Any) -> None:
    """Overwrite every rank's tensors with rank 0's (parameters at setup, buffers every step).

    Done as an all_reduce SUM of rank 0's values and zeros from the others (exact: x + 0 = x),
    in the same flattened buckets as the gradients.
    """
    first = dist.get_rank(group) == 0

    def from_rank_zero(flat: torch.Tensor) -> None:
        wire = flat.to(torch.uint8) if flat.dtype == torch.bool else flat  # gloo sums no bools
        if not first:
            wire.zero_()
        dist.all_reduce(wire, group=group)
        if wire is not flat:
            flat.copy_(wire.bool())

    with torch.no_grad():
        _flat_collective([t.data for t in tensors], from_rank_zero)


def average_gradients(
    params: Sequence[nn.Parameter], world: int, group: Any, *, weight: float | None = None
) -> None:
    """Mean of every parameter's gradient across ranks, in place; with ``weight``, the sum of
    every rank's gradient times its own weight (a weighted mean when the weights add up to 1).

    Ranks agree first on which parameters have a gradient anywhere (one small all_reduce): those
    with none on every rank (frozen, or unused by every rank's forward) are skipped; a rank
    without a gradient for a parameter another rank has contributes zeros.
    """
    device = params[0].device if params else torch.device("cpu")
    has = torch.tensor([p.grad is not None for p in params], dtype=torch.int32, device=device)
    dist.all_reduce(has, group=group)
    live = [p for p, n in zip(params, has.tolist(), strict=True) if n > 0]
    for p in live:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        elif p.grad.is_sparse:
            raise TrainerConfigError(
                "model.step(): sparse gradients are not averaged by Graph mode — use dense "
                "embeddings (sparse=False) or torch DistributedDataParallel"
            )
    with torch.no_grad():

        def reduce(flat: torch.Tensor) -> None:
            if weight is not None:
                flat.mul_(weight)
            dist.all_reduce(flat, group=group)
            if weight is None:
                flat.div_(world)

        _flat_collective([p.grad for p in live], reduce)  # type: ignore[misc]


def weighted_mean_(params: Sequence[nn.Parameter], weight: float, total: float, group: Any) -> None:
    """In place on every rank: Σ_r weight_r · θ_r / total. Frozen parameters are left alone
    (identical on every rank since setup, and a mean would only add rounding)."""
    live = [p.data for p in params if p.requires_grad]

    def reduce(flat: torch.Tensor) -> None:
        flat.mul_(weight / total)
        dist.all_reduce(flat, group=group)

    with torch.no_grad():
        _flat_collective(live, reduce)
