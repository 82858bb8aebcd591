"""The auto-balancer of Graph mode: each rank's share of every batch, from measured throughput.

In lockstep on devices that differ (El Che off), equal shards hold every rank to the slowest
one's pace. Here every rank reads the whole epoch order with the global batch size and takes a
slice of each batch: rank r gets ``chunk_ratios[r]`` of it. Ratios start equal (or from
``DdpConfig.speed_hint``). Each rank measures its own forward and backward time per step and
keeps an exponential moving average of its throughput (samples per ms, weight ``EMA_ALPHA``).
After ``CALIBRATION_STEPS`` steps, and every ``REBALANCE_INTERVAL`` steps after that, the ranks
share their throughputs (one small all-reduce) and set the ratios proportional to them, with no
rank under ``MIN_CHUNK_RATIO``: the same ratios on every rank, from the same numbers.

Gradients are then a weighted mean: rank r's gradient (of its mean loss over its slice) is
scaled by ``slice_r / batch`` and summed across ranks, which is the gradient of the mean loss
over the whole batch, however it was split.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from flodl.data import Batch
from flodl.train.collectives import average_gradients

CALIBRATION_STEPS = 10  # equal (or hinted) shares before the first rebalance
REBALANCE_INTERVAL = 50  # steps between later rebalances
EMA_ALPHA = 0.3  # weight of the newest throughput measurement
MIN_CHUNK_RATIO = 0.05  # no rank gets less than this share of a batch


def shard_sizes(batch: int, ratios: Sequence[float]) -> list[int]:
    """Each rank's rows of a batch of ``batch`` rows: ``round(batch * ratio)``, at least one per
    rank, the last rank taking what is left so the sizes add up to ``batch``.

    >>> shard_sizes(32, [0.7, 0.3]), shard_sizes(10, [0.5, 0.25, 0.25]), shard_sizes(2, [0.99, 0.01])
    ([22, 10], [5, 2, 3], [1, 1])
    """
    sizes, left, n = [], batch, len(ratios)
    for i, ratio in enumerate(ratios[:-1]):
        size = min(max(round(batch * ratio), 1), left - (n - i - 1))
        sizes.append(size)
        left -= size
    return [*sizes, left]


def ratios_for(throughput: Sequence[float]) -> list[float] | None:
    """Shares proportional to ``throughput``, none under ``MIN_CHUNK_RATIO``, summing to 1
    (None while nothing was measured).

    >>> [round(r, 3) for r in ratios_for([3.0, 1.0])]
    [0.75, 0.25]
    >>> [round(r, 3) for r in ratios_for([100.0, 1.0])]
    [0.95, 0.05]
    """
    total = sum(throughput)
    if total <= 0:
        return None
    ratios = [t / total for t in throughput]
    short = sum(MIN_CHUNK_RATIO - r for r in ratios if r < MIN_CHUNK_RATIO)
    if short > 0:
        # Raise the starved ranks to the floor, taking the difference from the others in
        # proportion to their shares (none of them pushed under the floor).
        rich = sum(r for r in ratios if r >= MIN_CHUNK_RATIO)
        ratios = [
            MIN_CHUNK_RATIO if r < MIN_CHUNK_RATIO else max(r - short * r / rich, MIN_CHUNK_RATIO)
            for r in ratios
        ]
    total = sum(ratios)
    return [r / total for r in ratios]


def hinted_ratios(world: int, slow_rank: int, ratio: float) -> list[float]:
    """Shares from a speed hint: the slow rank 1 part, every other rank ``ratio`` parts.

    >>> hinted_ratios(2, 1, 3.0)
    [0.75, 0.25]
    """
    weights = [max(ratio, 1.0)] * world
    weights[slow_rank] = 1.0
    return [w / sum(weights) for w in weights]


class Balancer:
    """The balancing side of a Graph-mode session: slices out of ``model.epoch()``, weighted
    gradient averaging and measurements in ``model.step()``."""

    def __init__(
        self,
        rank: int,
        world: int,
        device: torch.device,
        group: Any,
        ratios: list[float] | None = None,
    ) -> None:
        self.rank, self.world, self.device, self.group = rank, world, device, group
        self.chunk_ratios = list(ratios) if ratios is not None else [1.0 / world] * world
        self.throughput = [0.0] * world  # every rank's samples per ms, as of the last rebalance
        self._own = 0.0  # this rank's samples per ms (moving average), measured every step
        self.steps = 0
        self._rows = 0  # this rank's rows of the current batch
        self._batch = 0  # the whole batch's rows
        self._started: Any = None  # a perf_counter value, or a CUDA event on a GPU
        self._pending: tuple[Any, Any] | None = None  # a GPU step's events, read a step later

    # -------------------------------------------------------------- data
    def epoch(self, batches: Iterator[Any]) -> Iterator[Any]:
        """This rank's slice of every batch of an epoch read whole."""
        for batch in batches:
            rows = _rows(batch)
            sizes = shard_sizes(rows, self.chunk_ratios)
            first = sum(sizes[: self.rank])
            self._rows, self._batch = sizes[self.rank], rows
            self._started = self._now()
            yield _slice(batch, first, sizes[self.rank])

    # -------------------------------------------------------------- optimisation
    def average(self, params: Sequence[nn.Parameter]) -> None:
        """The whole batch's mean gradient on every rank, then a measurement and maybe a
        rebalance (the same on every rank)."""
        elapsed_ms = self._elapsed_ms()
        weight = self._rows / self._batch if self._batch else 1.0 / self.world
        average_gradients(params, self.world, self.group, weight=weight)
        if elapsed_ms > 0 and self._rows > 0:
            measured = self._rows / elapsed_ms
            own = self._own
            self._own = measured if own == 0 else EMA_ALPHA * measured + (1 - EMA_ALPHA) * own
        self.steps += 1
        due = self.steps - CALIBRATION_STEPS
        if due >= 0 and due % REBALANCE_INTERVAL == 0:
            self._rebalance()

    def _rebalance(self) -> None:
        mine = [self._own if r == self.rank else 0.0 for r in range(self.world)]
        wire = torch.tensor(mine, dtype=torch.float64, device=self.device)
        dist.all_reduce(wire, group=self.group)
        self.throughput = wire.tolist()
        ratios = ratios_for(self.throughput)
        if ratios is not None:
            self.chunk_ratios = ratios

    # -------------------------------------------------------------- timing
    def _now(self) -> Any:
        if self.device.type == "cuda":
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def _elapsed_ms(self) -> float:
        """This rank's time since its slice was handed out (forward and backward). On a GPU the
        pair of events of the previous step, read now that it has surely completed, so timing
        never makes the host wait for the device."""
        started, self._started = self._started, None
        if isinstance(started, float):
            return (time.perf_counter() - started) * 1e3
        pending, self._pending = self._pending, None
        if started is not None:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._pending = (started, end)
        if pending is None:
            return 0.0
        pending[1].synchronize()
        return float(pending[0].elapsed_time(pending[1]))


def _rows(batch: Any) -> int:
    tensors = batch.tensors if isinstance(batch, Batch) else batch
    return int(tensors[0].shape[0])


def _slice(batch: Any, first: int, rows: int) -> Any:
    if isinstance(batch, Batch):
        return Batch([t.narrow(0, first, rows) for t in batch.tensors], batch.names)
    return type(batch)(t.narrow(0, first, rows) for t in batch)
