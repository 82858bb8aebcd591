"""How an epoch's samples are shared between ranks, on top of :mod:`flodl.data.sampling`.

Every rank rebuilds the same permutation of the epoch (``fl.data.epoch_order``: ``seed + epoch``)
and trains on its own contiguous ``(offset, size)`` slice of it (``fl.data.make_partition``), so
within an epoch no sample is seen twice and no index lists travel between processes. This module
adds what only the trainer needs: sizes from measured speed, shards of one batch, and the chunk
pools of progressive dispatch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flodl.data.sampling import partition_sizes
from flodl.train.errors import TrainerConfigError


def throughput_sizes(n: int, ms_per_batch: Sequence[float]) -> list[int]:
    """Shares proportional to measured speed (1 / ms per batch): faster ranks get more.

    >>> throughput_sizes(90, [5.0, 10.0])
    [60, 30]
    """
    return partition_sizes(n, len(ms_per_batch), [1.0 / max(ms, 0.001) for ms in ms_per_batch])


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
