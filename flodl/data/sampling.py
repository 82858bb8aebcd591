"""Deterministic epoch orders and partitions across ranks.

One rule makes every process agree without talking: the order of epoch ``e`` is
``torch.randperm(n)`` drawn from a CPU generator seeded with ``seed + e``. Every rank computes the
same global permutation and takes its own contiguous, non-overlapping slice of it, so shards never
overlap and together cover the epoch. (The same torch version gives the same permutation on every
machine; the Rust original's permutation cannot be reproduced bit-for-bit and is not attempted.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from flodl.data.errors import LoaderConfigError

DEFAULT_SEED = 42
_SEED_MOD = 1 << 64


def epoch_seed(seed: int, epoch: int) -> int:
    """The generator seed of ``epoch``: ``seed + epoch``, wrapped to 64 bits."""
    return (seed + epoch) % _SEED_MOD


def epoch_order(n: int, epoch: int, *, seed: int = DEFAULT_SEED, shuffle: bool = True):
    """The order in which epoch ``epoch`` visits ``n`` samples (a 1-D int64 CPU tensor).

    Same ``(n, seed, epoch)`` → same order in every process; ``shuffle=False`` → ``0..n-1``.

    >>> import flodl as fl
    >>> a = fl.data.epoch_order(6, epoch=0, seed=7)
    >>> sorted(a.tolist()), a.equal(fl.data.epoch_order(6, epoch=0, seed=7))
    ([0, 1, 2, 3, 4, 5], True)
    >>> fl.data.epoch_order(4, epoch=3, shuffle=False).tolist()
    [0, 1, 2, 3]
    """
    if not shuffle:
        return torch.arange(n, dtype=torch.int64)
    generator = torch.Generator(device="cpu").manual_seed(epoch_seed(seed, epoch))
    return torch.randperm(n, generator=generator, dtype=torch.int64)


def partition_sizes(n: int, world_size: int, ratios: Sequence[float] | None = None) -> list[int]:
    """How many of ``n`` samples each of ``world_size`` ranks gets; the sizes sum to ``n``.

    Equal split: the first ``n % world_size`` ranks get one more (100 over 3 → [34, 33, 33]).
    With ``ratios`` (e.g. measured throughput of heterogeneous devices) the split is proportional,
    rounding by largest remainder; all-zero ratios mean an equal split.

    >>> import flodl as fl
    >>> fl.data.partition_sizes(100, 3), fl.data.partition_sizes(900, 3, [3, 2, 1])
    ([34, 33, 33], [450, 300, 150])
    """
    if world_size < 1:
        raise LoaderConfigError(f"partition: world_size must be ≥ 1, got {world_size}")
    if ratios is None or all(r == 0 for r in ratios):
        base, extra = divmod(n, world_size)
        return [base + (r < extra) for r in range(world_size)]
    ratios = [float(r) for r in ratios]
    if len(ratios) != world_size:
        raise LoaderConfigError(
            f"partition: {len(ratios)} ratios for {world_size} ranks — give one ratio per rank"
        )
    if any(r < 0 or not math.isfinite(r) for r in ratios):
        raise LoaderConfigError(f"partition: ratios must be finite and ≥ 0, got {ratios}")
    total = sum(ratios)
    exact = [n * r / total for r in ratios]
    sizes = [math.floor(x) for x in exact]
    by_remainder = sorted(range(world_size), key=lambda r: (sizes[r] - exact[r], r))
    for r in by_remainder[: n - sum(sizes)]:
        sizes[r] += 1
    return sizes


def make_partition(
    offset: int, size: int, n: int, epoch: int, *, seed: int = DEFAULT_SEED, shuffle: bool = True
) -> torch.Tensor:
    """Samples ``[offset, offset + size)`` of epoch ``epoch``'s order over ``n`` samples.

    Consecutive offsets give non-overlapping slices that together cover every sample.

    >>> import flodl as fl
    >>> a = fl.data.make_partition(0, 5, 10, epoch=1, seed=3)
    >>> b = fl.data.make_partition(5, 5, 10, epoch=1, seed=3)
    >>> sorted(a.tolist() + b.tolist()) == list(range(10))
    True
    """
    if offset < 0 or size < 0:
        raise LoaderConfigError(
            f"make_partition: offset and size must be ≥ 0, got {offset}, {size}"
        )
    order = epoch_order(n, epoch, seed=seed, shuffle=shuffle)
    return order[offset : min(offset + size, n)].clone()


def shard_bounds(
    n: int, rank: int, world_size: int, ratios: Sequence[float] | None, drop_last: bool
) -> tuple[int, int]:
    """(offset, size) of ``rank``'s shard, by the loader's drop/pad rule (see docs/data-loading.md).

    ``drop_last`` without ratios gives every rank ``n // world_size`` samples (the last
    ``n % world_size`` of each epoch's order are skipped) so that ranks run equal batch counts, as
    DistributedDataParallel needs. Otherwise the shards are :func:`partition_sizes` and cover all
    ``n`` samples exactly once.
    """
    if not 0 <= rank < world_size:
        raise LoaderConfigError(f"partition: rank {rank} is outside 0..{world_size - 1}")
    if drop_last and ratios is None:
        size = n // world_size
        return rank * size, size
    sizes = partition_sizes(n, world_size, ratios)
    return sum(sizes[:rank]), sizes[rank]
