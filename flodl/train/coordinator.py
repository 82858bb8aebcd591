"""The coordinator: decides when replicas average and which samples each rank trains next.

A pure state machine — no threads, clocks or sockets. The runtime feeds it what ranks report
(``on_timing``, ``on_sync_ack``, ``on_exiting``, ``on_metrics``, ``on_snapshot``) and calls
``tick(now)``; every call returns the control messages to send as ``(rank, message)`` pairs.
Aggregated epochs accumulate in :attr:`Coordinator.epochs_ready` (drain with ``take_epochs``).

Invariants that keep ranks from deadlocking (the Rust flodl's, kept unchanged):

1. never start an averaging unless every rank is active and has run >= 1 batch since the last;
2. never start the next collective averaging before every rank acknowledged the previous one
   (the acknowledgement is not counted as a training batch);
3. no throttle with the collective backend;
4. two ``Shutdown`` messages per rank (end of training loop, end of the exit drain) — the second
   is sent by the runtime after the coordinator finishes.

One deliberate difference: the overshoot gate (a rank streaming into the next epoch stops
``count + max_overshoot`` batches past the last averaging) applies to both backends. Without it a
fast rank drained every later epoch before a slow (or late-starting) rank finished its first
chunk: the slow rank was left with nothing to train, no averaging could happen again, and its
stale replica ended up in the final average. The Rust flodl kept the gate off the collective
backend because a gated rank there could not join a collective; here a rank waiting for work still
handles every control message, and when no rank has work left the coordinator averages at once
(``should_average``), which releases the gate.

A second one: each rank's first batch is counted but not timed (a warm-up, see
:mod:`flodl.train.el_che`). Timed, it stretched Cadence's next window to the anchor times that
batch's time, during which the rank was left almost nothing to train.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from flodl.data.sampling import partition_sizes
from flodl.train.averaging import average_snapshots, relative_divergence
from flodl.train.config import integer, number
from flodl.train.el_che import ElChe
from flodl.train.errors import TrainerConfigError
from flodl.train.guard import ConvergenceGuard, GuardAction
from flodl.train.messages import (
    ApplyPolicy,
    AverageBackend,
    BatchTiming,
    Checkpoint,
    ControlMsg,
    EpochPlan,
    Exiting,
    RequestParams,
    SetGlobalStep,
    Shutdown,
    Snapshot,
    StartEpoch,
    SyncAck,
    SyncNow,
    Throttle,
    Update,
)
from flodl.train.metrics import EpochMetrics, MetricsMsg, aggregate_epoch_metrics
from flodl.train.partition import ChunkPool, throughput_sizes

Outbox = list[tuple[int, ControlMsg]]

MIN_CHUNK_BATCHES = 4
OVERSHOOT_CEILING = 15


def dispatch_is_progressive(policy: ApplyPolicy, progressive: bool | None) -> bool:
    """Progressive (chunked) dispatch unless set: on for Cadence and Async, off for Sync."""
    return policy is not ApplyPolicy.SYNC if progressive is None else progressive


def check_partition_ratios(ratios: list[float] | None, world: int, progressive: bool) -> None:
    """User partition ratios: one finite, non-negative ratio per rank, per-epoch dispatch only."""
    if ratios is None:
        return
    if len(ratios) != world:
        raise TrainerConfigError(
            f"partition_ratios has {len(ratios)} entries for {world} ranks — give one ratio per rank"
        )
    if any(not 0 <= r < math.inf for r in ratios):
        raise TrainerConfigError(f"partition_ratios must be finite and >= 0, got {ratios}")
    if progressive:
        raise TrainerConfigError(
            "partition_ratios only apply to non-progressive dispatch (Cadence and Async dispatch "
            "progressively by default) — add .progressive_dispatch(False) or drop the ratios"
        )


@dataclass
class CoordinatorConfig:
    """Everything the coordinator needs to know about the run."""

    world: int
    num_epochs: int
    dataset_size: int
    batch_size: int
    policy: ApplyPolicy = ApplyPolicy.CADENCE
    backend: AverageBackend = AverageBackend.NCCL
    progressive: bool | None = None  # None: on for Cadence/Async, off for Sync
    partition_ratios: list[float] | None = None
    max_batch_diff: int | None = None
    max_overshoot: int | None = None  # None: auto-tuned (CPU backend + Async)
    checkpoint_every: int | None = None
    snapshot_timeout: float = 5.0
    device_indices: list[int] = field(default_factory=list)
    max_batches_per_rank: int | None = None  # FLODL_SMOKE: an epoch is this many batches per rank
    first_epoch: int = 0  # a resumed run: the epochs before it were trained by an earlier attempt
    global_step: int = 0  # a resumed run: the global step it starts from

    def __post_init__(self) -> None:
        self.world = integer("world", self.world, least=1)
        self.num_epochs = integer("num_epochs", self.num_epochs, least=1)
        self.batch_size = integer("batch_size", self.batch_size, least=1)
        self.dataset_size = integer("dataset_size", self.dataset_size, least=0)
        if self.max_batch_diff is not None:
            self.max_batch_diff = integer("max_batch_diff", self.max_batch_diff, least=0)
        if self.max_overshoot is not None:
            self.max_overshoot = integer("max_overshoot", self.max_overshoot, least=0)
        if self.checkpoint_every is not None:
            self.checkpoint_every = integer("checkpoint_every", self.checkpoint_every, least=1)
        self.snapshot_timeout = number("snapshot_timeout", self.snapshot_timeout, above=0.0)
        self.first_epoch = integer("first_epoch", self.first_epoch, least=0)
        if self.first_epoch >= self.num_epochs:
            raise TrainerConfigError(
                f"first_epoch {self.first_epoch}: the run has only {self.num_epochs} epochs"
            )
        self.global_step = integer("global_step", self.global_step, least=0)
        if self.dataset_size < self.batch_size * self.world:
            raise TrainerConfigError(
                f"the dataset has {self.dataset_size} samples, fewer than one batch of "
                f"{self.batch_size} per rank ({self.world} ranks): every epoch would have 0 "
                "batches on some rank — use a smaller batch_size or fewer devices"
            )
        check_partition_ratios(self.partition_ratios, self.world, self.is_progressive)
        if self.max_batches_per_rank is not None:  # a smoke run: epochs shrink to the cap
            cap = self.world * self.max_batches_per_rank * self.batch_size
            self.dataset_size = min(self.dataset_size, cap)
        if not self.device_indices:
            self.device_indices = [0] * self.world

    @property
    def is_progressive(self) -> bool:
        return dispatch_is_progressive(self.policy, self.progressive)

    @property
    def batches_per_epoch(self) -> int:
        return self.dataset_size // self.batch_size


@dataclass
class _CpuRound:
    """One CPU averaging round in flight: snapshots requested, not all received yet."""

    round: int
    started: float
    deadline: float
    steps: list[int]
    wall_ms: list[float]
    timed: list[int]
    counted: list[int]
    snapshots: dict[int, Snapshot] = field(default_factory=dict)


class Coordinator:
    """Scheduling for Builder-mode training: averaging triggers, epoch plans, aggregation."""

    def __init__(
        self,
        config: CoordinatorConfig,
        el_che: ElChe | None = None,
        guard: ConvergenceGuard | None = None,
    ) -> None:
        self.cfg = config
        w = config.world
        self.el_che = el_che if el_che is not None else (ElChe(w, 10) if w >= 2 else None)
        self.guard = guard if guard is not None else ConvergenceGuard()
        self.version = 0
        self.avg_count = 0
        self.global_step = config.global_step
        self.steps_since_avg = [0] * w
        self.wall_ms_accum = [0.0] * w
        # Batches in wall_ms_accum: all but each rank's first, a warm-up (module doc).
        self.timed_steps = [0] * w
        self._warmed_up = [False] * w
        self.last_step_count = [0] * w
        self.ack_pending = [False] * w
        self.divergences: list[float | None] = [None] * w
        self.sync_ms = [0.0] * w
        self.last_sync_ms = 0.0
        self.active = [True] * w
        self.throttled = [False] * w
        self.cpu_round: _CpuRound | None = None
        self.abort_count = 0
        self._rounds = 0
        self.aggregated = config.first_epoch - 1  # last aggregated epoch
        self.all_done = False
        self.epochs_ready: list[EpochMetrics] = []
        self._messages: dict[int, list[MetricsMsg]] = {}
        # non-progressive dispatch
        self._plans: dict[int, list[EpochPlan]] = {}
        self._rank_epoch = [config.first_epoch - 1] * w  # last epoch each rank finished
        self._waiting: set[int] = set()
        # progressive dispatch
        self.pools: dict[int, ChunkPool] = {}
        self._pool_started: dict[int, float] = {}
        self._rank_pool = [config.first_epoch] * w  # epoch each rank currently draws from
        self._in_flight = [0] * w  # samples dispatched, not yet reported
        self._owed = [0] * w  # plans sent, not yet reported (both dispatch modes)
        self._gated: set[int] = set()  # ranks refused work by the overshoot gate
        nb = config.batches_per_epoch
        self._overshoot_auto = config.max_overshoot is None
        self.max_overshoot = (
            config.max_overshoot if config.max_overshoot is not None else min(max(nb // 100, 2), 5)
        )
        self._overshoot_cap = min(max(nb // 50, 3), 10)

    # -- start -----------------------------------------------------------------------------------

    def start(self, now: float) -> Outbox:
        """The first plans (epoch 0, or ``first_epoch`` of a resumed run)."""
        if self.cfg.is_progressive:
            out: Outbox = []
            for r in range(self.cfg.world):
                out += self._dispatch_chunk(r, now)
            return out
        return self._send_plans(self.cfg.first_epoch)

    # -- inputs ----------------------------------------------------------------------------------

    def on_timing(self, msg: BatchTiming) -> None:
        r = msg.rank
        self.steps_since_avg[r] += 1
        if self._warmed_up[r]:
            self.wall_ms_accum[r] += msg.batch_ms
            self.timed_steps[r] += 1
        self._warmed_up[r] = True
        self.last_step_count[r] = max(self.last_step_count[r], msg.step_count)

    def on_sync_ack(self, msg: SyncAck) -> None:
        """Acknowledges a collective averaging; never counted as a batch."""
        r = msg.rank
        self.last_step_count[r] = max(self.last_step_count[r], msg.step_count)
        if msg.version == self.version:
            self.ack_pending[r] = False
            self.divergences[r] = msg.divergence
            self.sync_ms[r] = msg.sync_ms

    def on_exiting(self, msg: Exiting) -> None:
        self.active[msg.rank] = False

    def on_snapshot(self, msg: Snapshot) -> None:
        """A CPU-averaging snapshot; stale rounds and duplicates are ignored."""
        cpu = self.cpu_round
        if cpu is None or msg.round != cpu.round or not 0 <= msg.rank < self.cfg.world:
            return
        cpu.snapshots.setdefault(msg.rank, msg)

    def on_metrics(self, msg: MetricsMsg, now: float) -> Outbox:
        """A rank finished a plan (or chunk): credit it, give it more work, aggregate what is done."""
        r = msg.rank
        self._owed[r] = max(self._owed[r] - 1, 0)
        self._messages.setdefault(msg.epoch, []).append(msg)
        out: Outbox = []
        if self.cfg.is_progressive:
            pool = self.pools.get(msg.epoch)
            if pool is not None:
                pool.complete(r, msg.samples)
            self._in_flight[r] = max(self._in_flight[r] - msg.samples, 0)
            out += self._dispatch_chunk(r, now)
        else:
            self._rank_epoch[r] = max(self._rank_epoch[r], msg.epoch)
            if self.cfg.policy is ApplyPolicy.ASYNC:
                out += self._async_lookahead(r, msg.epoch + 1)
        out += self._try_aggregate(now)
        return out

    # -- the loop body ---------------------------------------------------------------------------

    def tick(self, now: float) -> Outbox:
        """Throttle, advance CPU averaging, and start an averaging when it is due."""
        out = self._check_throttle()
        out += self._poll_cpu(now)
        if self.should_average():
            out += self._trigger(now)
        return out

    @property
    def active_count(self) -> int:
        return sum(self.active)

    def should_average(self) -> bool:
        w = self.cfg.world
        if w < 2 or self.el_che is None:
            return False
        if self.cpu_round is not None or any(self.ack_pending) or self.all_done:
            return False
        if self.active_count < w or min(self.steps_since_avg) < 1:
            return False
        if self._gated and not any(self._owed):
            # A rank waits at the overshoot gate and nobody holds work: nothing would change the
            # counters any more, so the window is over — average now (releasing it), not never.
            return True
        counts = self.el_che.batch_counts
        reached = all(s >= c for s, c in zip(self.steps_since_avg, counts, strict=True))
        match self.cfg.policy:
            case ApplyPolicy.SYNC:
                return True
            case ApplyPolicy.CADENCE:
                if self.el_che.calibrated:
                    return min(self.wall_ms_accum) >= self.el_che.anchor_wall_ms()
                return reached
            case ApplyPolicy.ASYNC:
                return reached

    def owes(self, rank: int) -> bool:
        """Whether ``rank`` has something to deliver: a plan's metrics, an acknowledgement, or a
        snapshot. A silent rank that owes nothing is waiting for others, not stuck."""
        cpu = self.cpu_round
        return (
            self._owed[rank] > 0
            or self.ack_pending[rank]
            or (cpu is not None and rank not in cpu.snapshots)
        )

    def take_epochs(self) -> list[EpochMetrics]:
        ready, self.epochs_ready = self.epochs_ready, []
        return ready

    # -- averaging -------------------------------------------------------------------------------

    def _trigger(self, now: float) -> Outbox:
        w = self.cfg.world
        if self.cfg.backend is AverageBackend.NCCL:
            out: Outbox = [(r, SyncNow(self.version + 1)) for r in range(w)]
            self.ack_pending = [True] * w
            # Parity decision: feed the collective's measured cost (from the previous acks) to El Che,
            # so the anchor auto-tunes with the collective backend too (fed 0, it never moved). The
            # fastest rank's time is the communication itself; the others also waited for it.
            self.last_sync_ms = min(self.sync_ms)
            divergences = [d or 0.0 for d in self.divergences]
            out += self._finish(
                self.steps_since_avg,
                self.wall_ms_accum,
                self.timed_steps,
                self.last_sync_ms,
                divergences,
                self.last_step_count,
            )
            self.steps_since_avg = [0] * w
            self.wall_ms_accum = [0.0] * w
            self.timed_steps = [0] * w
            self.divergences = [None] * w
            out += self._redispatch_idle(now)
            return out
        self._rounds += 1
        self.cpu_round = _CpuRound(
            round=self._rounds,
            started=now,
            deadline=now + self.cfg.snapshot_timeout,
            steps=list(self.steps_since_avg),
            wall_ms=list(self.wall_ms_accum),
            timed=list(self.timed_steps),
            counted=list(self.last_step_count),
        )
        out = [(r, RequestParams(self._rounds)) for r in range(w)]
        if self.cfg.policy is ApplyPolicy.SYNC:
            # Lockstep: batches trained while averaging would be overwritten by the Update.
            out += [(r, Throttle()) for r in range(w)]
        return out

    def _poll_cpu(self, now: float) -> Outbox:
        cpu = self.cpu_round
        if cpu is None:
            return []
        w = self.cfg.world
        if len(cpu.snapshots) < w:
            if now >= cpu.deadline:  # soft abort: no version bump, try again later
                self.abort_count += 1
                self.cpu_round = None
            return []
        snaps = [cpu.snapshots[r] for r in range(w)]
        params, buffers = average_snapshots(
            [s.params for s in snaps], [s.buffers for s in snaps], [s.batch_count for s in snaps]
        )
        divergences = [relative_divergence(s.params, params) for s in snaps]
        self.cpu_round = None
        out: Outbox = [(r, Update(self.version + 1, params, buffers)) for r in range(w)]
        self.last_sync_ms = (now - cpu.started) * 1e3
        out += self._finish(
            cpu.steps, cpu.wall_ms, cpu.timed, self.last_sync_ms, divergences, cpu.counted
        )
        # Batches trained during the round carry over into the next window.
        self.steps_since_avg = [
            max(a - b, 0) for a, b in zip(self.steps_since_avg, cpu.steps, strict=True)
        ]
        self.wall_ms_accum = [
            max(a - b, 0.0) for a, b in zip(self.wall_ms_accum, cpu.wall_ms, strict=True)
        ]
        self.timed_steps = [max(a - b, 0) for a, b in zip(self.timed_steps, cpu.timed, strict=True)]
        out += self._redispatch_idle(now)
        return out

    def _finish(
        self,
        steps: list[int],
        wall_ms: list[float],
        timed: list[int],
        sync_ms: float,
        divergences: list[float],
        counted: list[int],
    ) -> Outbox:
        assert self.el_che is not None
        if any(wall > 0 for wall in wall_ms):
            self.el_che.report_timing(list(wall_ms), list(timed), sync_ms)
        action = self.guard.observe(divergences, sync_policy=self.cfg.policy is ApplyPolicy.SYNC)
        self.version += 1
        self.avg_count += 1
        if (
            action is GuardAction.STABLE
            and self._overshoot_auto
            and self.cfg.policy is ApplyPolicy.ASYNC
        ):
            self.max_overshoot = min(self.max_overshoot + 1, self._overshoot_cap, OVERSHOOT_CEILING)
        self.global_step += sum(steps)
        self.throttled = [False] * self.cfg.world
        # Each rank's step counter as of this count: a rank adds only the batches it ran since.
        msg = SetGlobalStep(self.global_step, tuple(counted))
        return [(r, msg) for r in range(self.cfg.world)]

    def _check_throttle(self) -> Outbox:
        d = self.cfg.max_batch_diff
        if (
            d is None
            or self.cfg.backend is AverageBackend.NCCL
            or self.active_count < self.cfg.world
        ):
            return []
        floor = min(self.steps_since_avg)
        out: Outbox = []
        for r, steps in enumerate(self.steps_since_avg):
            if steps > floor + d and not self.throttled[r]:
                self.throttled[r] = True
                out.append((r, Throttle()))
        return out

    # -- dispatch --------------------------------------------------------------------------------

    def _plan_sizes(self) -> list[int]:
        n, w = self.cfg.dataset_size, self.cfg.world
        if self.cfg.partition_ratios is not None:
            return partition_sizes(n, w, self.cfg.partition_ratios)
        el = self.el_che
        if self.cfg.policy is ApplyPolicy.SYNC or el is None:
            return partition_sizes(n, w)
        if el.calibrated:
            return throughput_sizes(n, el.ms_per_batch)
        if el.has_speed_hint:
            return partition_sizes(n, w, el.batch_counts)
        return partition_sizes(n, w)

    def _plans_for(self, epoch: int) -> list[EpochPlan]:
        if epoch not in self._plans:
            sizes = self._plan_sizes()
            offsets = [sum(sizes[:r]) for r in range(len(sizes))]
            self._plans[epoch] = [
                EpochPlan(epoch, o, s) for o, s in zip(offsets, sizes, strict=True)
            ]
        return self._plans[epoch]

    def _send_plans(self, epoch: int) -> Outbox:
        return [
            self._start(r, plan) for r, plan in enumerate(self._plans_for(epoch)) if self.active[r]
        ]

    def _start(self, rank: int, plan: EpochPlan) -> tuple[int, ControlMsg]:
        self._owed[rank] += 1
        return (rank, StartEpoch(plan))

    def _async_lookahead(self, rank: int, epoch: int) -> Outbox:
        if epoch >= self.cfg.num_epochs:
            return []
        if epoch <= self.aggregated + 2:  # at most one epoch ahead of the last aggregated + 1
            return [self._start(rank, self._plans_for(epoch)[rank])]
        self._waiting.add(rank)
        return []

    def _chunk_batches(self, rank: int, pool: ChunkPool) -> int:
        bs, w = self.cfg.batch_size, self.cfg.world
        remaining = pool.remaining // bs
        el = self.el_che
        cap = self.cfg.max_batches_per_rank or remaining
        if el is None or not (el.calibrated or el.has_speed_hint):
            target = max(self.cfg.dataset_size // (w * 10 * bs), MIN_CHUNK_BATCHES)
            return min(target, remaining, cap)
        counts = el.batch_counts
        target = math.ceil(remaining * counts[rank] / sum(counts))
        ms = el.ms_per_batch[rank]
        if remaining < target * w and ms > 0:
            # Tail balance: do not take more than fits while the others finish what they hold.
            others = [
                pool.in_flight(o) / bs * el.ms_per_batch[o]
                for o in range(w)
                if o != rank and el.ms_per_batch[o] > 0
            ]
            longest = max(others, default=0.0)
            if longest > ms:
                target = min(target, int(longest // ms))
        return min(max(target, MIN_CHUNK_BATCHES), remaining, cap)

    def _pool(self, epoch: int, now: float) -> ChunkPool:
        if epoch not in self.pools:
            size = self.cfg.batches_per_epoch * self.cfg.batch_size
            self.pools[epoch] = ChunkPool(epoch, size, self.cfg.world)
            self._pool_started[epoch] = now
        return self.pools[epoch]

    def _dispatch_chunk(self, rank: int, now: float) -> Outbox:
        if not self.active[rank] or self.all_done or self._in_flight[rank] > 0:
            return []
        epoch = max(self._rank_pool[rank], self.aggregated + 1)
        while epoch < self.cfg.num_epochs:
            pool = self._pool(epoch, now)
            if pool.remaining >= self.cfg.batch_size and self._quota(rank, pool) > 0:
                break
            epoch += 1  # cross-epoch streaming: this epoch is fully handed out (for this rank)
        else:
            return []
        if epoch > self.aggregated + 1 and self._overshoot_blocked(rank):
            self._gated.add(rank)
            return []
        self._gated.discard(rank)
        batches = min(self._chunk_batches(rank, pool), self._quota(rank, pool))
        chunk = pool.take(rank, batches * self.cfg.batch_size)
        if chunk is None or chunk[1] == 0:
            return []
        self._rank_pool[rank] = epoch
        self._in_flight[rank] = chunk[1]
        return [self._start(rank, EpochPlan(epoch, chunk[0], chunk[1]))]

    def _quota(self, rank: int, pool: ChunkPool) -> int:
        """Batches ``rank`` may still take from ``pool``: unbounded, except in a smoke run, where
        each rank's share of an epoch is the cap (so no rank is handed work it may not train)."""
        cap = self.cfg.max_batches_per_rank
        if cap is None:
            return pool.remaining // self.cfg.batch_size
        return max(cap - pool.dispatched[rank] // self.cfg.batch_size, 0)

    def _overshoot_blocked(self, rank: int) -> bool:
        """A rank running into the next epoch must not race ahead of the averaging window: past
        its El Che count plus ``max_overshoot`` it waits for the next averaging (module doc)."""
        if self.el_che is None:
            return False
        return self.steps_since_avg[rank] >= self.el_che.batches(rank) + self.max_overshoot

    def _redispatch_idle(self, now: float) -> Outbox:
        if not self.cfg.is_progressive:
            return []
        out: Outbox = []
        for r in range(self.cfg.world):
            out += self._dispatch_chunk(r, now)
        return out

    # -- aggregation -----------------------------------------------------------------------------

    def _epoch_done(self, epoch: int) -> bool:
        if self.cfg.is_progressive:
            pool = self.pools.get(epoch)
            return pool is not None and pool.remaining < self.cfg.batch_size and pool.done
        ranks = {m.rank for m in self._messages.get(epoch, [])}
        return len(ranks) >= self.active_count

    def _try_aggregate(self, now: float) -> Outbox:
        out: Outbox = []
        while not self.all_done and self._epoch_done(self.aggregated + 1):
            epoch = self.aggregated + 1
            started = self._pool_started.pop(epoch, None)
            metrics = aggregate_epoch_metrics(
                epoch,
                self._messages.pop(epoch, []),
                self.cfg.world,
                epoch_ms=(now - started) * 1e3 if started is not None else None,
            )
            metrics.device_indices = list(self.cfg.device_indices)
            if self.el_che is not None and self.cfg.policy is not ApplyPolicy.SYNC:
                # Under Sync El Che decides nothing (every batch is averaged, data split
                # equally): its counts would only mislead a dashboard.
                metrics.batch_counts = list(self.el_che.batch_counts)
                metrics.anchor = self.el_che.anchor
            self.epochs_ready.append(metrics)
            self.pools.pop(epoch, None)
            self._plans.pop(epoch, None)
            out += self._on_epoch_aggregated(epoch, now)
        return out

    def _on_epoch_aggregated(self, epoch: int, now: float) -> Outbox:
        self.aggregated = epoch
        out: Outbox = []
        every = self.cfg.checkpoint_every
        if every and (epoch + 1) % every == 0:
            out.append((0, Checkpoint(epoch + 1)))
        if epoch == self.cfg.num_epochs - 1:
            self.all_done = True
            return [*out, *((r, Shutdown()) for r in range(self.cfg.world))]
        if self.cfg.is_progressive:
            out += self._redispatch_idle(now)
        elif self.cfg.policy is ApplyPolicy.ASYNC:
            waiting, self._waiting = sorted(self._waiting), set()
            for r in waiting:
                out += self._async_lookahead(r, self._rank_epoch[r] + 1)
        else:
            out += self._send_plans(epoch + 1)
        return out
