"""Builder-mode ranks in lockstep over collectives: Sync and Cadence without a coordinator.

With the collective backend, Sync and Cadence need no central decision: every rank can compute
the same schedule from what the collectives already carry, the way Graph mode does.

- **Sync**: each epoch is split equally (or by ``partition_ratios``); after every batch the ranks
  average their parameters, weighted by the batches each trained (a rank whose share ran out
  contributes weight 0, so unequal shares never desynchronise the collectives).
- **Cadence**: each epoch's order is cut into El Che windows; rank r trains the next ``counts[r]``
  batches of a window, then one all-reduce averages the parameters (batch-weighted) and carries
  every rank's compute time and batch count, from which each rank updates the same El Che state
  (the anchor, per-rank counts), so the next window's counts agree everywhere.

Epoch metrics are gathered to rank 0, which publishes them on the control store as the
coordinator would; the final state is the batch-weighted average of every rank's replica. A rank
waiting for a peer in a collective that fails (the peer stopped) hands its replica in, and the
supervising process averages the survivors for the error's ``.partial``.

Progress for the supervising process's watch: :attr:`LockstepRank.progress` counts the
collectives this rank entered and the batches it trained; a rank behind its peers that stops
moving for the run's timeout is named as stuck (its peers wait for it in a collective).
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from flodl.data.sampling import make_partition, partition_sizes
from flodl.log import get_logger
from flodl.monitor import timeline
from flodl.train import step_context
from flodl.train.averaging import final_state
from flodl.train.checkpointing import flush_checkpoints, save_version
from flodl.train.el_che import ElChe, steady_wall_ms
from flodl.train.errors import CollectiveError
from flodl.train.messages import ApplyPolicy, AverageBackend
from flodl.train.metrics import EpochMetrics, MetricsMsg, RankEvents, aggregate_epoch_metrics
from flodl.train.train_spec import TrainSpec
from flodl.train.trained_state import TrainedState
from flodl.train.worker import Worker, forwarded_events

log = get_logger("flodl.train")


def window_counts(
    el_che: ElChe, remaining: int, cap: int | None, taken: list[int]
) -> list[int] | None:
    """Each rank's batches for Cadence's next window, or None when the epoch is over.

    ``remaining``: batches left in the epoch; ``taken``: each rank's batches so far in it. In a
    smoke run (``cap``: batches per rank and epoch) every rank trains ``cap`` batches, fewer
    only if the data runs out, whatever El Che proposes: a rank that reached the cap sits the
    next windows out (it joins their averaging with weight 0) while the others catch up.

    >>> el = ElChe(2, 2).with_speed_ratio(1, 2.0)  # rank 0 twice as fast
    >>> el.window(4)  # El Che's proposal for the 4 batches of a smoke epoch (cap 2, 2 ranks)
    [3, 1]
    >>> window_counts(el, 4, 2, [0, 0]), window_counts(el, 1, 2, [2, 1])
    ([2, 1], [0, 1])
    >>> window_counts(el, 0, 2, [2, 2]) is None
    True
    """
    counts = el_che.window(remaining)
    if cap is None:
        return counts
    proposed = counts or [1] * len(taken)  # fewer batches left than ranks: one each, in order
    out = []
    for count, done in zip(proposed, taken, strict=True):
        k = max(min(count, cap - done, remaining), 0)
        out.append(k)
        remaining -= k
    return out if any(out) else None


def runs_in_lockstep(spec: TrainSpec) -> bool:
    """Whether a multi-rank Builder run needs no coordinator: Sync or Cadence with collective
    averaging. Async (each rank's own pace), the CPU backend (snapshots averaged centrally),
    and chunked dispatch where a policy asks for it keep the coordinator.

    >>> from flodl.train.train_spec import TrainSpec
    >>> spec = TrainSpec(None, None, None, policy=ApplyPolicy.SYNC)
    >>> runs_in_lockstep(spec), runs_in_lockstep(TrainSpec(None, None, None))
    (True, True)
    >>> runs_in_lockstep(TrainSpec(None, None, None, policy=ApplyPolicy.ASYNC))
    False
    """
    if spec.backend is not AverageBackend.NCCL:
        return False
    if spec.policy is ApplyPolicy.SYNC:
        return spec.progressive is not True
    if spec.policy is ApplyPolicy.CADENCE:
        # Cadence's own dispatch is by throughput: El Che's windows give it without a chunk pool.
        # Per-epoch plans (progressive off, or fixed ratios) stay with the coordinator.
        return spec.progressive is not False and spec.partition_ratios is None
    return False


class LockstepRank:
    """One rank's whole run in lockstep: epochs, averaging, metrics, checkpoints, the result."""

    def __init__(
        self, worker: Worker, spec: TrainSpec, *, first_epoch: int = 0, metrics: Any = None
    ) -> None:
        self.worker = worker
        self.spec = spec
        self.rank, self.world = worker.rank, worker.world
        self.first_epoch = first_epoch
        self.metrics = metrics  # rank 0: a KeyWriter for the training process's feed
        self.el_che: ElChe | None = (
            spec.el_che.build(self.world) if spec.policy is ApplyPolicy.CADENCE else None
        )
        self.syncs = 0  # collectives entered: the supervising process compares ranks by it
        self.version = 0
        self._last_sync_ms = 0.0
        self._idle_ms = 0.0
        self._warmed_up = False  # this rank's first batch ran (a warm-up El Che does not time)

    @property
    def progress(self) -> str:
        """``"<collectives entered> <batches trained>"``: read by the heartbeat thread."""
        return f"{self.syncs} {self.worker.local_step}"

    # -- the run ---------------------------------------------------------------------------------

    def run(self) -> TrainedState | None:
        """Train every epoch; the averaged result on rank 0, None on the others."""
        epochs = self.spec.epochs()
        every = self.spec.checkpoint_every
        for epoch in range(self.first_epoch, epochs):
            started = time.perf_counter()
            if self.el_che is None:
                msg = self._sync_epoch(epoch)
            else:
                msg = self._cadence_epoch(epoch)
            msg.wall_ms = (time.perf_counter() - started) * 1e3
            self._gather_metrics(epoch, msg)
            save = self.worker.checkpoint_fn
            if every and (epoch + 1) % every == 0 and self.rank == 0 and save is not None:
                save_version(save, epoch + 1, self.worker.model)
        flush_checkpoints()  # its event goes out with the final snapshot
        return self._final()

    def _begin_epoch(self, epoch: int) -> None:
        worker = self.worker
        if epoch != worker.current_epoch:
            worker.current_epoch = epoch
            worker.ctx.epoch = epoch
            if worker.epoch_fn is not None:
                worker.epoch_fn(epoch, worker)

    def _batches(self, n: int) -> int:
        """Batches of ``n`` samples, capped per epoch in a smoke run."""
        batches = n // self.worker.batch_size
        cap = self.worker.max_batches
        return batches if cap is None else min(batches, cap)

    # -- Sync: average after every batch ---------------------------------------------------------

    def _sync_epoch(self, epoch: int) -> MetricsMsg:
        worker = self.worker
        self._begin_epoch(epoch)
        n, bs = worker.dataset_size, worker.batch_size
        sizes = partition_sizes(n, self.world, self.spec.partition_ratios)
        offset = sum(sizes[: self.rank])
        indices = make_partition(offset, sizes[self.rank], n, epoch, seed=worker.seed)
        mine = self._batches(sizes[self.rank])
        rounds = max(self._batches(s) for s in sizes)
        start = time.perf_counter()
        loss_sum = 0.0
        for b in range(rounds):
            trained = b < mine
            if trained:
                batch = worker.fetch(indices[b * bs : (b + 1) * bs])
                loss, _ = worker.train_batch(batch)
                loss_sum += loss
            self._average(weight=1.0 if trained else 0.0)
        return self._report(epoch, loss_sum, mine, sizes[self.rank], start)

    # -- Cadence: El Che windows -----------------------------------------------------------------

    def _cadence_epoch(self, epoch: int) -> MetricsMsg:
        worker, el_che = self.worker, self.el_che
        assert el_che is not None
        self._begin_epoch(epoch)
        n, bs = worker.dataset_size, worker.batch_size
        order = make_partition(0, n, n, epoch, seed=worker.seed)
        total = n // bs
        cap = worker.max_batches
        if cap is not None:  # a smoke run: each rank's share is the cap
            total = min(total, cap * self.world)
        start = time.perf_counter()
        loss_sum, trained, done = 0.0, 0, 0
        taken = [0] * self.world
        while (counts := window_counts(el_che, total - done, cap, taken)) is not None:
            taken = [t + c for t, c in zip(taken, counts, strict=True)]
            first = done + sum(counts[: self.rank])
            began = time.perf_counter()
            timed = counts[self.rank]
            for b in range(first, first + counts[self.rank]):
                loss, _ = worker.train_batch(worker.fetch(order[b * bs : (b + 1) * bs]))
                loss_sum += loss
                if not self._warmed_up:  # the rank's first batch: a warm-up, not timed
                    self._warmed_up = True
                    began, timed = time.perf_counter(), timed - 1
            compute_ms = steady_wall_ms(
                (time.perf_counter() - began) * 1e3, timed, counts[self.rank]
            )
            trained += counts[self.rank]
            self._window_sync(counts[self.rank], compute_ms)
            done += sum(counts)
        return self._report(epoch, loss_sum, trained, trained * bs, start)

    def _window_sync(self, batches: int, compute_ms: float) -> None:
        """Average the window's replicas and tell every rank's El Che the same timings."""
        el_che = self.el_che
        assert el_che is not None
        w = self.world
        # One slot per rank: compute ms, batches, the previous sync's cost (each rank measured
        # its own). The convergence guard has nothing to steer here (it bounds Async overshoot).
        facts = torch.zeros(3 * w, dtype=torch.float64)
        facts[self.rank] = compute_ms
        facts[w + self.rank] = batches
        facts[2 * w + self.rank] = self._last_sync_ms
        facts = self._average(weight=float(batches), facts=facts)
        wall_ms = facts[:w].tolist()
        actual = [int(x) for x in facts[w : 2 * w].tolist()]
        # The fastest rank's sync time is the communication itself; the others also waited.
        sync_ms = min(facts[2 * w : 3 * w].tolist())
        anchor = el_che.anchor
        el_che.report_timing(wall_ms, actual, sync_ms)
        if el_che.anchor != anchor and self.rank == 0:  # one event per change, from rank 0
            log.debug("El Che anchor %s -> %s", anchor, el_che.anchor)
            timeline.emit("anchor_changed", **{"from": anchor, "to": el_che.anchor})

    # -- the collective --------------------------------------------------------------------------

    def _average(self, *, weight: float, facts: torch.Tensor | None = None) -> torch.Tensor:
        """``Σ w_r · θ_r / Σ w_r`` over ranks in one all-reduce, with ``facts`` riding along
        (returned summed, float64 on the CPU); the global step advances by the batches every
        rank trained since the last."""
        worker = self.worker
        version = self.version + 1
        waited = time.perf_counter()
        timeline.emit("sync_start", mode="builder", version=version)
        params = list(worker.model.parameters())
        flat = torch.nn.utils.parameters_to_vector([p.detach() for p in params])
        # At least float32 on the wire, so the facts' counts and times stay exact enough.
        dtype = torch.promote_types(flat.dtype, torch.float32)
        parts = [flat.to(dtype) * weight, flat.new_tensor([weight], dtype=dtype)]
        if facts is not None:
            parts.append(facts.to(device=flat.device, dtype=dtype))
        wire = torch.cat(parts)
        self.syncs += 1
        try:
            dist.all_reduce(wire, op=dist.ReduceOp.SUM)
        except Exception as err:
            raise CollectiveError(
                f"rank {self.rank}: averaging version {version} failed ({err}) — a peer stopped"
            ) from err
        size = flat.numel()
        total = float(wire[size])
        flat = (wire[:size] / total).to(flat.dtype)
        torch.nn.utils.vector_to_parameters(flat, params)
        self.version = version
        worker.steps_since_avg = 0
        worker.set_global_step(worker.global_step + round(total))
        sync_ms = (time.perf_counter() - waited) * 1e3
        self._idle_ms += sync_ms
        self._last_sync_ms = sync_ms
        timeline.emit("sync_end", mode="builder", version=version, duration_ms=sync_ms)
        return wire[size + 1 :].to(torch.float64).cpu()

    def _gather(self, value: Any) -> list[Any] | None:
        """``value`` of every rank, on rank 0 (None elsewhere)."""
        out: list[Any] | None = [None] * self.world if self.rank == 0 else None
        self.syncs += 1
        try:
            dist.gather_object(value, out, dst=0)
        except Exception as err:
            raise CollectiveError(
                f"rank {self.rank}: gathering from every rank failed ({err}) — a peer stopped"
            ) from err
        return out

    # -- metrics and the result ------------------------------------------------------------------

    def _report(
        self, epoch: int, loss_sum: float, batches: int, samples: int, start: float
    ) -> MetricsMsg:
        worker = self.worker
        idle, self._idle_ms = self._idle_ms, 0.0
        return MetricsMsg(
            rank=self.rank,
            epoch=epoch,
            avg_loss=loss_sum / batches if batches else 0.0,
            batches=batches,
            epoch_ms=(time.perf_counter() - start) * 1e3,
            samples=samples,
            scalars=step_context.drain_scalars(),
            device_index=worker.device.index or 0,
            resources=worker.resources(),
            idle_ms=idle,
            events=forwarded_events(),
        )

    def _gather_metrics(self, epoch: int, msg: MetricsMsg) -> None:
        gathered = self._gather(msg)
        if gathered is None:
            return
        metrics: EpochMetrics = aggregate_epoch_metrics(epoch, gathered, self.world)
        if self.el_che is not None:
            metrics.batch_counts = list(self.el_che.batch_counts)
            metrics.anchor = self.el_che.anchor
        if self.metrics is not None:
            self.metrics.put(metrics)

    def _final(self) -> TrainedState | None:
        """Every rank's replica and late timeline events to rank 0, which publishes the events
        (before the result, so the training process has them when ``join()`` returns)."""
        gathered = self._gather((self.worker.snapshot(), forwarded_events()))
        if gathered is None:
            return None  # not rank 0: the result is read from the store
        events = sorted((e for _, ev in gathered for e in ev), key=lambda e: e["wall"])
        if events and self.metrics is not None:
            self.metrics.put(RankEvents(events))
        state = final_state({snap.rank: snap for snap, _ in gathered})
        assert state is not None
        return state
