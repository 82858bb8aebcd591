"""El Che in Graph mode: heterogeneous ranks run different batch counts per window.

Every rank iterates the same epoch order. Each window takes ``sum(counts)`` batches from it and
gives rank r the next ``counts[r]`` of them (the slowest rank runs ``anchor``, faster ones
proportionally more). After the rank's last batch of a window, ``model.step()`` synchronises:
per-rank compute times and batch counts are summed across ranks (each rank fills its own slot),
then, by ``DdpConfig.average``:

- ``"gradients"`` (the original): earlier steps of the window only let gradients accumulate; they
  are summed across ranks and divided by the window's total batch count, so with per-batch mean
  losses the one optimizer step of the window uses the mean gradient over all its batches.
- ``"params"`` (local SGD): every step runs the rank's own optimizer; the sync replaces every
  rank's parameters by their batch-count weighted mean.

El Che then recalibrates the counts from the measured times, identically on every rank.

Decisions and the differences from the original are in docs/ddp.md ("El Che in Graph mode").
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from flodl.monitor import timeline
from flodl.train.collectives import average_gradients, broadcast_from_rank_zero, weighted_mean_
from flodl.train.config import ElCheConfig, number
from flodl.train.el_che import ElChe, steady_wall_ms
from flodl.train.errors import TrainerConfigError

AVERAGES = {"params": "params", "gradients": "gradients", "grads": "gradients"}


@dataclass(frozen=True)
class DdpConfig(ElCheConfig):
    """Graph-mode multi-device knobs for ``fl.Trainer.setup(..., config=DdpConfig(...))``.

    The El Che knobs (``anchor``, ``max_anchor``, ``overhead_target``, ``speed_hint``,
    ``max_batch_diff``) are :class:`~flodl.train.config.ElCheConfig`'s, with the same defaults
    and checks as Builder mode's setters. Passing a config turns El Che on (as the original's
    ``setup_with``) unless ``max_anchor=0``; without one, El Che is on only when the ranks'
    devices differ (heterogeneous GPUs), with this class's defaults.

    Args:
        speed_hint: ``(slow_rank, ratio)``: seed the counts before any timing (the slow rank runs
            the anchor, the others ``ratio`` times as many); corrected after the first window.
        overhead_target: tolerated sync cost as a fraction of compute time ([0.01, 0.50]).
        max_anchor: cap of the slow rank's batches per window (default 200); 0 turns El Che off.
        max_grad_norm: clip the gradient to this norm before every optimizer step.
        average: what El Che averages at the end of a window. ``"params"`` (the default; local
            SGD, as Builder mode's CADENCE): every batch steps the rank's own optimizer, and the
            window ends with the batch-count weighted mean of the ranks' parameters.
            ``"grads"`` (or ``"gradients"``; the original's behaviour): gradients accumulate over
            the window, one optimizer step per window with the mean gradient of all its batches
            — a loop written for one device then takes one step per window, far fewer per epoch.
        balance: with El Che off (``max_anchor=0``), split every batch between the ranks by
            their measured throughput (the auto-balancer, ``flodl.train.graph_balance``).
            None (the default): when the ranks' devices differ; True: always; False: never
            (equal shards).

    >>> import flodl as fl
    >>> fl.DdpConfig(speed_hint=(1, 2.0), max_anchor=50).el_che_enabled
    True
    >>> fl.DdpConfig(max_anchor=0).el_che_enabled
    False
    >>> fl.DdpConfig().average, fl.DdpConfig(average="grads").average
    ('params', 'gradients')
    """

    max_grad_norm: float | None = None
    average: str = "params"
    balance: bool | None = None

    _least_max_anchor = 0  # 0: El Che off

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.average, str) or self.average not in AVERAGES:
            raise TrainerConfigError(
                "average must be one of 'params', 'grads' (also spelled 'gradients'), got "
                f"{self.average!r}"
            )
        object.__setattr__(self, "average", AVERAGES[self.average])
        if self.max_grad_norm is not None:
            norm = number("max_grad_norm", self.max_grad_norm, above=0.0)
            object.__setattr__(self, "max_grad_norm", norm)
        if self.balance is not None and not isinstance(self.balance, bool):
            raise TrainerConfigError(
                f"balance must be True, False or None (when the devices differ), got "
                f"{self.balance!r}"
            )
        if self.balance and self.el_che_enabled:
            raise TrainerConfigError(
                "balance=True splits batches in lockstep; El Che balances by batch counts per "
                "window instead: pass max_anchor=0 with it"
            )

    @property
    def el_che_enabled(self) -> bool:
        return self.max_anchor != 0

    def el_che(self, world: int) -> ElChe:
        """The El Che state this config describes for ``world`` ranks."""
        return self.build(world)


def devices_differ(device: torch.device, group: Any) -> bool:
    """Whether the ranks train on different kinds of device (e.g. a 4090 beside a 3060)."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    code = zlib.crc32(name.encode())
    wire = torch.tensor([code, -code], dtype=torch.int64, device=device)
    dist.all_reduce(wire, op=dist.ReduceOp.MAX, group=group)
    return int(wire[0]) != -int(wire[1])


@dataclass
class _Window:
    started: float
    yielded: int = 0
    untimed: int = 0  # batches before ``started``: the rank's first, a warm-up
    stepped: int = 0
    last_yielded: bool = False
    synced: bool = False


class Cadence:
    """The El Che side of a Graph-mode session: windows out of ``model.epoch()``, syncs in
    ``model.step()``. ``step`` callables are the session's local step (clip, LR, optimizer)."""

    def __init__(
        self,
        el_che: ElChe,
        rank: int,
        device: torch.device,
        group: Any,
        *,
        local_steps: bool = False,
    ) -> None:
        self.el_che = el_che
        self.rank = rank
        self.device = device
        self.group = group
        self.local_steps = local_steps
        self._window: _Window | None = None
        self._warmed_up = False  # this rank's first batch ran (a warm-up El Che does not time)
        self._last_sync_ms = 0.0
        self.history: list[list[int]] = []  # counts of every synced window (actual batches)

    @property
    def in_window(self) -> bool:
        return self._window is not None and not self._window.synced

    # -------------------------------------------------------------- data
    def epoch(
        self, loader: Any, epoch: int, graph: nn.Module, step: Callable[[], None]
    ) -> Iterator:
        """This rank's batches of ``epoch``, window by window (see the module docstring)."""
        total = len(loader)
        done = 0
        try:
            while (counts := self.el_che.window(total - done)) is not None:
                first = done + sum(counts[: self.rank])
                mine = range(first, first + counts[self.rank])
                self._window = window = _Window(time.perf_counter())
                with loader.epoch_subset(epoch, mine) as batches:
                    for i, batch in enumerate(batches):
                        window.yielded += 1
                        window.last_yielded = i == counts[self.rank] - 1
                        yield batch
                        if not self._warmed_up:  # the loop ran the rank's first batch
                            self._warmed_up = True
                            window.started, window.untimed = time.perf_counter(), window.yielded
                if not window.synced:  # the loop body skipped step() after the last batch
                    self.sync(graph, step)
                done += sum(counts)
        finally:
            # Leaving mid-window (break, exception) still syncs what ran, so the peers' step()
            # is matched and no accumulated gradient is dropped (the original's epoch-end flush).
            if self._window is not None and not self._window.synced and self._window.yielded:
                self.sync(graph, step)
            self._window = None

    # -------------------------------------------------------------- optimisation
    def step(self, graph: nn.Module, step: Callable[[], None]) -> None:
        """``model.step()`` inside a window: accumulate (or, averaging parameters, step the
        rank's own optimizer), and sync after the window's last batch."""
        window = self._window
        assert window is not None
        if self.local_steps:
            step()
            window.stepped = window.yielded
        if window.last_yielded:
            self.sync(graph, step)

    def sync(self, graph: nn.Module, optimizer_step: Callable[[], None]) -> None:
        window = self._window
        assert window is not None and not window.synced
        window.synced = True
        arrived = time.perf_counter()
        timeline.emit("sync_start", mode="graph")
        world = self.el_che.world
        # One slot per rank: compute ms, batches run, and the previous sync's cost (each rank
        # measured its own; El Che gets the max, so every rank feeds it the same numbers).
        facts = torch.zeros(3 * world, dtype=torch.float64)
        # Still in the rank's first batch (a one-batch window): all of it is the warm-up.
        untimed = window.untimed if self._warmed_up else window.yielded
        facts[self.rank] = steady_wall_ms(
            (arrived - window.started) * 1000.0, window.yielded - untimed, window.yielded
        )
        facts[world + self.rank] = window.yielded
        facts[2 * world + self.rank] = self._last_sync_ms
        wire = facts.to(self.device)
        dist.all_reduce(wire, group=self.group)
        facts = wire.cpu()
        # That first collective absorbed the wait for the slowest rank: the sync's own cost (what
        # El Che weighs against compute) is timed from here.
        start = time.perf_counter()
        wall_ms = facts[:world].tolist()
        actual = [int(n) for n in facts[world : 2 * world].tolist()]
        sync_ms = max(facts[2 * world :].tolist())
        total = sum(actual)
        params = list(graph.parameters())
        if self.local_steps:
            if window.stepped < window.yielded:  # the loop skipped step() after its last batch
                optimizer_step()
            weighted_mean_(params, window.yielded, max(total, 1), self.group)
        else:
            live = [p for p in params if p.requires_grad]
            average_gradients(live, max(total, 1), self.group)  # Σ over every batch / total
        broadcast_from_rank_zero(list(graph.buffers()), self.group)
        self._last_sync_ms = (time.perf_counter() - start) * 1000.0
        if not self.local_steps:
            optimizer_step()
        timeline.emit("sync_end", mode="graph", duration_ms=(time.perf_counter() - arrived) * 1e3)
        anchor = self.el_che.anchor
        self.el_che.report_timing(wall_ms, actual, sync_ms)
        if self.el_che.anchor != anchor:
            timeline.emit("anchor_changed", **{"from": anchor, "to": self.el_che.anchor})
        self.history.append(actual)
