"""Which samples each rank trains on: one seeded global permutation, contiguous slices of it.

Every rank rebuilds the same permutation of ``0..n`` from ``seed + epoch`` and takes its own
``(offset, size)`` slice, so within an epoch no sample is seen twice and no index lists travel
between processes.

>>> a = make_partition(10, epoch=0, offset=0, size=5, seed=7)
>>> b = make_partition(10, epoch=0, offset=5, size=5, seed=7)
>>> sorted(a + b) == list(range(10))
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from flodl.train.errors import TrainerConfigError


def epoch_permutation(n: int, epoch: int, seed: int) -> torch.Tensor:
    """The global order of ``n`` samples for ``epoch``: identical on every rank and process."""
    generator = torch.Generator().manual_seed(seed + epoch)
    return torch.randperm(n, generator=generator)


def make_partition(n: int, *, epoch: int, offset: int, size: int, seed: int) -> list[int]:
    """Indices ``perm[offset : offset + size]`` of the epoch's permutation."""
    if offset < 0 or size < 0 or offset + size > n:
        raise TrainerConfigError(
            f"partition [{offset}, {offset + size}) is outside the dataset of {n} samples"
        )
    return epoch_permutation(n, epoch, seed)[offset : offset + size].tolist()


def equal_sizes(n: int, world: int) -> list[int]:
    """Equal shares, the remainder to the first ranks (100 over 3 -> [34, 33, 33])."""
    base, extra = divmod(n, world)
    return [base + (1 if r < extra else 0) for r in range(world)]


def ratio_sizes(n: int, ratios: Sequence[float]) -> list[int]:
    """Shares proportional to ``ratios`` (normalised; all-zero -> equal), remainder to the largest."""
    if any(r < 0 for r in ratios):
        raise TrainerConfigError(f"partition ratios must be >= 0, got {list(ratios)}")
    total = sum(ratios)
    if total <= 0:
        return equal_sizes(n, len(ratios))
    sizes = [math.floor(n * r / total) for r in ratios]
    by_size = sorted(range(len(ratios)), key=lambda r: (-ratios[r], r))
    for i in range(n - sum(sizes)):
        sizes[by_size[i % len(by_size)]] += 1
    return sizes


def throughput_sizes(n: int, ms_per_batch: Sequence[float]) -> list[int]:
    """Shares proportional to measured speed (1 / ms per batch): faster ranks get more."""
    return ratio_sizes(n, [1.0 / max(ms, 0.001) for ms in ms_per_batch])


def shard_sizes(batch: int, ratios: Sequence[float]) -> list[int]:
    """Split one batch across devices: sums to ``batch``, every device >= 1, last takes the rest.

    >>> shard_sizes(11, [0.5, 0.5]), shard_sizes(10, [0.5, 0.3, 0.2])
    ([6, 5], [5, 3, 2])
    """
    world = len(ratios)
    if batch < world:
        raise TrainerConfigError(f"a batch of {batch} cannot give each of {world} devices a sample")
    total = sum(ratios) or 1.0
    sizes = [max(round(batch * r / total), 1) for r in ratios[:-1]]
    while sum(sizes) > batch - 1:
        sizes[sizes.index(max(sizes))] -= 1
    return [*sizes, batch - sum(sizes)]


@dataclass
class ChunkPool:
    """One epoch's samples, handed out as consecutive non-overlapping ``(offset, size)`` chunks.

    >>> pool = ChunkPool(epoch=0, size=10, world=2)
    >>> pool.take(0, 4), pool.take(1, 8), pool.take(0, 1)
    ((0, 4), (4, 6), None)
    """

    epoch: int
    size: int
    world: int

    def __post_init__(self) -> None:
        self.cursor = 0
        self.dispatched = [0] * self.world
        self.completed = [0] * self.world

    @property
    def remaining(self) -> int:
        return self.size - self.cursor

    def take(self, rank: int, samples: int) -> tuple[int, int] | None:
        """The next chunk for ``rank`` (clamped to what is left); None once exhausted."""
        if samples == 0:
            return (self.cursor, 0)
        if self.remaining <= 0:
            return None
        size = min(samples, self.remaining)
        chunk = (self.cursor, size)
        self.cursor += size
        self.dispatched[rank] += size
        return chunk

    def complete(self, rank: int, samples: int) -> None:
        self.completed[rank] += samples

    def in_flight(self, rank: int) -> int:
        return self.dispatched[rank] - self.completed[rank]

    @property
    def done(self) -> bool:
        return self.remaining <= 0 and all(
            c >= d for c, d in zip(self.completed, self.dispatched, strict=True)
        )
