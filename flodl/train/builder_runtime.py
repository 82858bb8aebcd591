"""Running a :class:`~flodl.train.train_spec.TrainSpec`: in-process on one device, or one process per
device on ``torch.distributed`` with a coordinator thread in rank 0.
"""

from __future__ import annotations

import os
import pickle
import queue
import threading
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from flodl.data.sources import as_source, require_samples
from flodl.log import get_logger, set_rank
from flodl.monitor import timeline
from flodl.train import step_context
from flodl.train.averaging import final_state
from flodl.train.checkpointing import SaveFdl, flush_checkpoints, save_version
from flodl.train.coordinator import Coordinator, CoordinatorConfig
from flodl.train.errors import (
    CollectiveError,
    CoordinatorGoneError,
    CoordinatorLostError,
    TrainerConfigError,
    TrainingError,
    failed_at,
    naming_ranks,
    rank_failure,
)
from flodl.train.guard import ConvergenceGuard
from flodl.train.lockstep import LockstepRank, runs_in_lockstep
from flodl.train.messages import (
    BatchTiming,
    EpochPlan,
    Exiting,
    Shutdown,
    Snapshot,
    SyncAck,
)
from flodl.train.metrics import EpochMetrics, MetricsMsg, RankEvents, aggregate_epoch_metrics
from flodl.train.process_group import init_spawned_group, is_lost_peer, is_timeout, leave_group
from flodl.train.resume import ResumableCheckpoint, ResumePoint, load_model, rescale_lr
from flodl.train.train_spec import TrainSpec
from flodl.train.trained_state import TrainedState
from flodl.train.transport import (
    CoordinatorChannel,
    GlooCollective,
    Heartbeat,
    KeyWriter,
    LocalLink,
    RankChannel,
    client,
    heartbeat_timeout,
    ranks_behind,
    still_beating,
)
from flodl.train.worker import FINAL_ROUND, Worker, forwarded_events

FINAL_KEY = "final"


log = get_logger("flodl.train")


def _build(
    spec: TrainSpec,
    rank: int,
    world: int,
    device: torch.device,
    channel=None,
    collective=None,
    resume: ResumePoint | None = None,
) -> Worker:
    # The factories may ask where they run (fl.train.current()); the worker installs its own.
    step_context.install(step_context.WorkerContext(rank=rank, world_size=world, device=device))
    dataset = as_source(spec.resolve_dataset())
    model = spec.model_factory(device)
    if not isinstance(model, torch.nn.Module):
        raise TrainerConfigError(
            f"model_factory must return a torch.nn.Module, got {type(model).__name__}"
        )
    model = model.to(device)
    model.train()
    if world > 1:
        check_ranks_agree(spec, rank, world, require_samples(dataset), model, resume)
    if resume is not None and rank == 0:  # only rank 0 reads the file; the broadcast does the rest
        load_model(model, resume.model_path)
    if world > 1:  # every replica starts from rank 0's weights
        for t in [*model.parameters(), *model.buffers()]:
            dist.broadcast(t.data, src=0)
    optimizer = spec.optim_factory(model.parameters())
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TrainerConfigError(
            f"optim_factory must return a torch.optim.Optimizer, got {type(optimizer).__name__}"
        )
    scale = (
        1.0 + (world - 1) * spec.lr_scale_ratio if world > 1 and spec.lr_scale_ratio > 0 else 1.0
    )
    worker = Worker(
        rank=rank,
        world=world,
        device=device,
        model=model,
        optimizer=optimizer,
        train_step=spec.train_step,
        dataset=dataset,
        batch_size=spec.batch_size or 1,
        seed=spec.seed,
        policy=spec.policy,
        scheduler=built_scheduler(spec, world),
        lr_scale=scale,
        max_grad_norm=spec.max_grad_norm,
        epoch_fn=spec.epoch_fn,
        checkpoint_fn=spec.checkpoint_fn,
        max_batches=spec.max_batches(),
        channel=channel,
        collective=collective,
        sample_resources=spec.monitor_resources and world > 1,
    )
    if resume is not None and resume.optimizer is not None:
        # Rank 0's state, on every rank; loaded after the Worker applied this world's lr_scale
        # to the factory's rates, since the saved rates already include a scale.
        optimizer.load_state_dict(resume.optimizer)
        if worker.local.scheduler is None:
            rescale_lr(optimizer, resume, scale)
    if resume is not None:  # the scheduler goes on from the global step of the checkpoint
        # The global step counts every rank's batches: the same at any world size.
        worker.global_step = worker.ctx.global_step = resume.global_step
    return worker


def check_ranks_agree(
    spec: TrainSpec,
    rank: int,
    world: int,
    dataset_size: int,
    model: torch.nn.Module,
    resume: ResumePoint | None = None,
) -> None:
    """Before the first broadcast, one small collective: every rank's dataset size and parameter
    layout. Factories run in every rank, and one that builds something else on some rank (other
    data, another architecture) would otherwise train on part of the data, hang in a collective
    or fail deep in gloo. Every rank raises the same :class:`TrainerConfigError`; so does a
    dataset too small for one batch per rank (the check ``run()`` makes for data it holds)."""
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, (dataset_size, model_layout(model)))
    sizes = [size for size, _ in gathered]
    if len(set(sizes)) > 1:
        each = ", ".join(f"{n} samples on rank {r}" for r, n in enumerate(sizes))
        raise TrainerConfigError(
            f"the dataset factory built different data on the ranks ({each}) — every rank "
            "must build the same dataset (the ranks split one epoch order by index)"
        )
    for other in range(1, world):
        difference = first_difference(gathered[0][1], gathered[other][1], other)
        if difference is not None:
            raise TrainerConfigError(
                f"model_factory built different parameters on rank 0 and rank {other}: "
                f"{difference} — every rank must build the same architecture (the replicas "
                "start from rank 0's weights and are averaged element by element)"
            )
    coordinator_for(spec, world, dataset_size, resume)  # the settings' checks, on this size


def model_layout(model: torch.nn.Module) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, dtype) of every parameter and buffer, in the order they are averaged."""
    named = [*model.named_parameters(), *(("buffer " + n, b) for n, b in model.named_buffers())]
    return [(name, tuple(t.shape), str(t.dtype).removeprefix("torch.")) for name, t in named]


def first_difference(
    ours: list[tuple[str, tuple[int, ...], str]],
    theirs: list[tuple[str, tuple[int, ...], str]],
    rank: int,
) -> str | None:
    """The first way rank ``rank``'s layout differs from rank 0's, said for a person; None if
    they are the same.

    >>> a = [("w", (8, 4), "float32")]
    >>> first_difference(a, [("w", (12, 4), "float32")], 1)
    'w is (8, 4) float32 on rank 0, (12, 4) float32 on rank 1'
    >>> first_difference(a, [*a, ("extra.weight", (1, 1), "float32")], 1)
    'rank 1 has extra.weight (1, 1) float32, which rank 0 lacks'
    """
    if ours == theirs:
        return None

    def said(entry: tuple[str, tuple[int, ...], str]) -> str:
        return f"{tuple(entry[1])} {entry[2]}"

    for a, b in zip(ours, theirs, strict=False):
        if a == b:
            continue
        if a[0] == b[0]:
            return f"{a[0]} is {said(a)} on rank 0, {said(b)} on rank {rank}"
        return f"rank 0 has {a[0]} {said(a)} where rank {rank} has {b[0]} {said(b)}"
    if len(theirs) > len(ours):
        extra = theirs[len(ours)]
        return f"rank {rank} has {extra[0]} {said(extra)}, which rank 0 lacks"
    missing = ours[len(theirs)]
    return f"rank 0 has {missing[0]} {said(missing)}, which rank {rank} lacks"


def built_scheduler(spec: TrainSpec, world: int) -> Any:
    """The scheduler ``spec.scheduler_factory(world)`` builds (None without a factory), checked."""
    if spec.scheduler_factory is None:
        return None
    scheduler = spec.scheduler_factory(world)
    if scheduler is None or not (callable(getattr(scheduler, "lr", None)) or callable(scheduler)):
        raise TrainerConfigError(
            f"scheduler: the factory returned {type(scheduler).__name__} {scheduler!r}, not a "
            "scheduler — it must return an object with .lr(step) or a function step -> lr "
            "(.scheduler() takes a factory world_size -> scheduler, e.g. def make(world): "
            "return fl.optim.CosineScheduler(...))"
        )
    return scheduler


def run_single(
    spec: TrainSpec,
    device: torch.device,
    on_epoch: Callable[[EpochMetrics], None],
    *,
    resume: ResumePoint | None = None,
    resume_token: str | None = None,
) -> TrainedState:
    """The one-device path: synchronous, in the calling thread; every epoch is the whole dataset.
    The calling thread's step context is put back afterwards. ``resume`` and ``resume_token``
    as in :func:`rank_main` (a ``torchrun`` job of one rank)."""
    callers = step_context.installed()
    try:
        return _run_single(spec, device, on_epoch, resume, resume_token)
    finally:
        step_context.install(callers)


def _run_single(
    spec: TrainSpec,
    device: torch.device,
    on_epoch: Callable[[EpochMetrics], None],
    resume: ResumePoint | None,
    resume_token: str | None,
) -> TrainedState:
    worker = _build(spec, 0, 1, device, resume=resume)
    if resume_token is not None and isinstance(worker.checkpoint_fn, SaveFdl):
        worker.checkpoint_fn = ResumableCheckpoint(worker.checkpoint_fn, worker, resume_token)
    n = worker.dataset_size
    if n < worker.batch_size:
        raise TrainerConfigError(
            f"the dataset has {n} samples, fewer than one batch of {worker.batch_size}: every "
            "epoch would have 0 batches — use a smaller batch_size"
        )
    for epoch in range(resume.version if resume is not None else 0, spec.epochs()):
        msg = worker.run_plan(EpochPlan(epoch, 0, n))
        assert msg is not None
        metrics = aggregate_epoch_metrics(epoch, [msg], 1)
        on_epoch(metrics)
        if (
            spec.checkpoint_every
            and (epoch + 1) % spec.checkpoint_every == 0
            and worker.checkpoint_fn
        ):
            save_version(worker.checkpoint_fn, epoch + 1, worker.model)
    flush_checkpoints()
    return TrainedState(
        [p.cpu().clone() for p in worker.params()], [b.cpu().clone() for b in worker.buffers()]
    )


# -- multi-rank ----------------------------------------------------------------------------------


def rank_main(
    rank: int,
    world: int,
    spec: TrainSpec,
    host: str,
    port: int,
    device: str,
    *,
    watch_coordinator: bool = False,
    local_world: int | None = None,
    resume: ResumePoint | None = None,
    resume_token: str | None = None,
    on_crash: Callable[[BaseException], None] | None = None,
) -> TrainedState:
    """One rank's process: join the group, train under the coordinator, return the final state.

    ``watch_coordinator`` (under a launcher, where no supervising process of ours watches rank 0):
    a rank waiting for work gives up once rank 0's control store has been silent for the run's
    timeout, raising :class:`CoordinatorGoneError` instead of waiting forever. ``local_world``: the
    ranks on this machine (default ``world``), which share its cores. ``resume``: start after
    that checkpoint; ``resume_token`` (rank 0): write a restart's training state with every
    checkpoint (see :mod:`flodl.train.resume`). ``on_crash(err)`` is called with an exception
    leaving this function before anything is torn down: a peer's failure that the teardown
    causes (its collective losing this rank) then always comes after this rank's own report.
    """
    set_rank(rank)
    torch_device = torch.device(device)
    threads = intra_op_threads(spec.threads_per_rank, local_world or world)
    if torch_device.type == "cpu":
        torch.set_num_threads(threads)
    if torch_device.type == "cuda":
        torch.cuda.set_device(torch_device)
    store = client(host, port, spec.timeout)
    heartbeat = Heartbeat(host, port, rank)
    lockstep = runs_in_lockstep(spec)
    if not dist.is_initialized():
        backend = "nccl" if torch_device.type == "cuda" else "gloo"
        # In lockstep the supervising process names a rank its peers wait for after the run's
        # timeout; their collectives must not give up first and take the blame.
        limit = spec.timeout + heartbeat_timeout(spec.timeout) if lockstep else spec.timeout
        init_spawned_group(backend, store, rank, world, limit)
    coordinator: CoordinatorThread | None = None
    channel: LocalLink | RankChannel | None = None
    watched = watch_coordinator and rank != 0
    launched = watch_coordinator  # under a launcher: no supervising process of ours
    gone = False  # rank 0 stopped answering: nothing that needs it may be called any more
    # Spawned ranks send their timeline events to the training process with their metrics (a
    # rank whose own script runs a Timeline, under a launcher, records them there instead).
    forwarding = spec.timeline_events and not timeline.timelines_running()
    forwarder = timeline.EventForwarder().install() if forwarding else None
    try:
        if lockstep:
            return _run_lockstep(
                spec, rank, world, torch_device, store, heartbeat, resume, resume_token, launched
            )
        if rank == 0:  # the coordinator runs here: its messages to rank 0 stay in-process
            channel = LocalLink()
        else:
            channel = RankChannel(
                host,
                port,
                rank,
                watch=heartbeat if watched else None,
                limit=spec.timeout,
                lost_key=None if watch_coordinator else COORDINATOR_LOST_KEY,
            )
        worker = _build(spec, rank, world, torch_device, channel, GlooCollective(world), resume)
        if resume_token is not None and isinstance(worker.checkpoint_fn, SaveFdl):
            worker.checkpoint_fn = ResumableCheckpoint(worker.checkpoint_fn, worker, resume_token)
        if isinstance(channel, LocalLink):  # rank 0: after the ranks agreed on the data's size
            coordinator = CoordinatorThread(
                spec, world, host, port, worker.dataset_size, resume, local=channel
            )
            coordinator.start()
        log.info("rank %d of %d joined on %s", rank, world, device)
        try:
            worker.run()
        except BaseException as err:
            if not watch_coordinator and store.check([COORDINATOR_LOST_KEY]):
                hand_in(store, worker)  # the supervising process averages the survivors
            if isinstance(err, CoordinatorLostError):
                raise CoordinatorGoneError(str(err), rank=0) from None
            raise
        finally:
            if channel is not None:
                channel.close()
            flush_checkpoints()  # a rank process may end with os._exit: no atexit flush there
        return wait_final(store, spec.timeout)
    except BaseException as err:
        gone = isinstance(err, CoordinatorGoneError)
        if on_crash is not None:
            on_crash(err)
        raise
    finally:
        if forwarder is not None:
            forwarder.remove()
        if coordinator is not None:
            coordinator.join(spec.timeout)
        if gone or (channel is not None and channel.lost):
            # Every call to rank 0 would block: leave the group and the threads to the exit.
            heartbeat.stop(timeout=0)
        else:  # the final state was read from the store after every rank sent its own
            leave_group(wait_for_peers=False)
            heartbeat.stop()


# Under a launcher, a rank whose collective failed blames rank 0 when rank 0's control store
# has not answered its heartbeat for this long (several missed beats, not one slow reply).
RANK0_SILENT_S = 2.0


def _run_lockstep(
    spec: TrainSpec,
    rank: int,
    world: int,
    device: torch.device,
    store: dist.TCPStore,
    heartbeat: Heartbeat,
    resume: ResumePoint | None,
    resume_token: str | None,
    launched: bool,
) -> TrainedState:
    """A rank of a Sync or Cadence run over collectives (:mod:`flodl.train.lockstep`): no
    coordinator, no control messages; rank 0 publishes the epochs and the result.

    ``launched``: under a launcher, where no supervising process of ours collects survivors. A
    failed collective there is blamed on rank 0 when its control store went silent too."""
    worker = _build(spec, rank, world, device, resume=resume)
    if resume_token is not None and isinstance(worker.checkpoint_fn, SaveFdl):
        worker.checkpoint_fn = ResumableCheckpoint(worker.checkpoint_fn, worker, resume_token)
    metrics = KeyWriter(store, "metrics") if rank == 0 else None
    run = LockstepRank(
        worker, spec, first_epoch=resume.version if resume is not None else 0, metrics=metrics
    )
    heartbeat.progress = lambda: run.progress
    log.info("rank %d of %d joined in lockstep", rank, world)
    try:
        state = run.run()
    except CollectiveError as err:
        if not launched:
            hand_in(store, worker)  # a peer stopped: the supervising process averages survivors
        elif heartbeat.silent_for() > RANK0_SILENT_S:
            raise CoordinatorGoneError(
                f"rank 0 stopped responding: its control store has been silent for "
                f"{heartbeat.silent_for():.0f} s and averaging with it failed ({err})",
                rank=0,
            ) from None
        elif err.__cause__ is not None and (
            is_timeout(err.__cause__) or is_lost_peer(err.__cause__)
        ):
            # Alive (its heartbeat beats) but stuck short of this collective: name it, as the
            # supervising process does for ranks it started. A lost peer is one too when the
            # ranks behind still beat: gloo closes a timed-out rank's connections, so a rank
            # that entered later sees them close before its own timeout. A crashed rank's
            # heartbeat stops: then its closed connection is the error.
            behind = [r for r in ranks_behind(store, world, run.syncs) if r != rank]
            if behind and (is_timeout(err.__cause__) or still_beating(store, behind)):
                raise naming_ranks(
                    behind,
                    f"{{ranks}} made no progress for {spec.timeout:.0f} s while its peers "
                    f"waited for it in a collective (rank {rank} stops here, and the launcher "
                    "ends the others); if it was busy, give it longer with .timeout(seconds)",
                ) from err
        raise
    except BaseException as err:
        err.add_note(failed_at(rank, worker.local_step, worker.current_epoch))
        raise
    finally:
        flush_checkpoints()
    if state is not None:  # rank 0
        store.set(FINAL_KEY, pickle.dumps((state, [])))  # type: ignore[arg-type]  # torch's annotation says str; the store takes bytes
    return wait_final(store, spec.timeout)


def intra_op_threads(requested: int | None, local_world: int) -> int:
    """A CPU rank's intra-op threads: as requested, else an equal share of this machine's cores
    between the ranks on this machine (on several machines, not the whole world)."""
    return requested or max(1, (os.cpu_count() or 1) // max(local_world, 1))


# Set by the supervising process (which hosts the control store of spawned ranks) when it
# stopped a frozen rank 0: the survivors then hand their replicas to it (:func:`hand_in`).
COORDINATOR_LOST_KEY = "coordinator-lost"


def survivor_key(rank: int) -> str:
    return f"survivor/{rank}"


def hand_in(store: dist.TCPStore, worker: Worker) -> None:
    """This rank's replica, for the supervising process to average when rank 0 (and with it the
    coordinator, which would have) is gone."""
    store.set(survivor_key(worker.rank), pickle.dumps(worker.snapshot()))  # type: ignore[arg-type]  # torch's annotation says str; the store takes bytes


def first_cause(errors: list[tuple[int, str]]) -> tuple[int, str]:
    """The error that caused the others: a rank whose averaging failed because a peer stopped
    (``CollectiveError``) reports a consequence, whatever order the reports arrived in."""
    causes = [e for e in errors if "CollectiveError" not in e[1]]
    return (causes or errors)[0]


def wait_final(store: dist.TCPStore, timeout: float) -> TrainedState:
    store.wait([FINAL_KEY], timedelta(seconds=timeout + 15))
    state, errors = pickle.loads(store.get(FINAL_KEY))
    if errors:
        rank, details = first_cause(errors)
        raise rank_failure(rank, details, partial=state)
    if state is None:
        raise TrainingError("training ended without a final state from any rank")
    return state


def coordinator_for(
    spec: TrainSpec, world: int, dataset_size: int, resume: ResumePoint | None = None
) -> Coordinator:
    """The coordinator, El Che and convergence guard a run's settings describe (pure objects);
    with ``resume``, starting after its epochs and at its global step."""
    cfg = CoordinatorConfig(
        world=world,
        num_epochs=spec.epochs(),
        dataset_size=dataset_size,
        batch_size=spec.batch_size or 1,
        policy=spec.policy,
        backend=spec.backend,
        progressive=spec.progressive,
        partition_ratios=spec.partition_ratios,
        max_batch_diff=spec.el_che.max_batch_diff,
        max_overshoot=spec.max_overshoot,
        checkpoint_every=spec.checkpoint_every,
        snapshot_timeout=spec.snapshot_timeout,
        max_batches_per_rank=spec.max_batches(),
        first_epoch=resume.version if resume is not None else 0,
        global_step=resume.global_step if resume is not None else 0,
    )
    el_che = spec.el_che.build(world)
    guard = ConvergenceGuard(spec.divergence_threshold, enabled=spec.divergence_guard)
    return Coordinator(cfg, el_che, guard)


class CoordinatorThread(threading.Thread):
    """Hosts the pure :class:`Coordinator` in rank 0's process and publishes epochs and the result."""

    def __init__(
        self,
        spec: TrainSpec,
        world: int,
        host: str,
        port: int,
        dataset_size: int,
        resume: ResumePoint | None = None,
        local: LocalLink | None = None,
    ) -> None:
        super().__init__(name="flodl-coordinator", daemon=True)
        self.spec, self.world = spec, world
        self.channel = CoordinatorChannel(host, port, world, local)
        self.coord = coordinator_for(spec, world, dataset_size, resume)
        self._metrics = KeyWriter(self.channel.store, "metrics")
        self._late_events: list[dict[str, Any]] = []  # sent with the ranks' Exiting messages
        # The anchor El Che starts from: a change the first batch of messages makes is a change.
        self._anchor = None if self.coord.el_che is None else self.coord.el_che.anchor

    def _send(self, out) -> None:
        for rank, msg in out:
            self.channel.send(rank, msg)

    def _publish(self, metrics: EpochMetrics) -> None:
        self._metrics.put(metrics)

    def _note_anchor(self) -> None:
        """A timeline event (and a debug line) when El Che moved the anchor."""
        el_che = self.coord.el_che
        anchor = None if el_che is None else el_che.anchor
        before, self._anchor = self._anchor, anchor
        if anchor != before:
            log.debug("El Che anchor %s -> %s", before, anchor)
            timeline.emit("anchor_changed", **{"from": before, "to": anchor})

    def run(self) -> None:
        finals: dict[int, Snapshot] = {}
        errors: list[tuple[int, str]] = []
        exited: set[int] = set()
        coord = self.coord
        try:
            last_seen = [time.monotonic()] * self.world
            self._send(coord.start(time.monotonic()))
            next_death_check = 0.0
            while not coord.all_done and len(exited) < self.world and not errors:
                try:
                    first = self.channel.inbox.get(timeout=0.01)
                except queue.Empty:
                    first = None
                batch = [] if first is None else [first]
                while True:
                    try:
                        batch.append(self.channel.inbox.get_nowait())
                    except queue.Empty:
                        break
                now = time.monotonic()
                for msg in batch:
                    self._dispatch(msg, now, finals, errors, exited, last_seen)
                if now >= next_death_check:  # ranks the supervising process saw die
                    next_death_check = now + 0.25
                    for rank, error in self._deaths(exited):
                        self._dispatch(Exiting(rank, error), now, finals, errors, exited, last_seen)
                for metrics in coord.take_epochs():
                    self._publish(metrics)
                self._note_anchor()
                # Silence counts only while a rank owes something (metrics, an ack, a snapshot):
                # a rank idly waiting for the others' work is not stuck.
                for r in range(self.world):
                    if not coord.owes(r):
                        last_seen[r] = now
                stalled = [
                    r
                    for r in range(self.world)
                    if r not in exited and now - last_seen[r] > self.spec.timeout
                ]
                if stalled:
                    culprit = min(stalled, key=lambda r: last_seen[r])  # silent the longest
                    errors.append(
                        (culprit, f"rank {culprit} made no progress for {self.spec.timeout:.0f} s")
                    )
                    break
                self._send(coord.tick(now))
            if errors:
                self._send([(r, Shutdown()) for r in range(self.world) if r not in exited])
            self._collect_finals(finals, errors, exited)
            self._note_anchor()
            # This thread's own events after rank 0's worker sent its last message.
            self._late_events += forwarded_events()
            if self._late_events:  # on the metrics stream, so they arrive before the result
                self._metrics.put(RankEvents(sorted(self._late_events, key=lambda e: e["wall"])))
            state = final_state(finals)
        except BaseException:
            errors.append((0, "coordinator failed:\n" + traceback.format_exc()))
            state = None
        self.channel.store.set(FINAL_KEY, pickle.dumps((state, errors)))  # type: ignore[arg-type]  # torch's annotation says str; the store takes bytes
        self.channel.close()

    def _deaths(self, exited: set[int]) -> list[tuple[int, str]]:
        """Ranks reported dead (``dead/<rank>``, set by the supervising process): a rank killed
        or crashed hard sends nothing itself, and its survivors' average is still worth having."""
        store = self.channel.store
        return [
            (r, store.get(f"dead/{r}").decode())
            for r in range(self.world)
            if r not in exited and store.check([f"dead/{r}"])
        ]

    def _dispatch(self, msg, now, finals, errors, exited, last_seen) -> None:
        coord = self.coord
        rank = getattr(msg, "rank", None)
        if rank is not None:
            last_seen[rank] = now
        match msg:
            case BatchTiming():
                coord.on_timing(msg)
            case SyncAck():
                coord.on_sync_ack(msg)
            case MetricsMsg():
                self._send(coord.on_metrics(msg, now))
            case Snapshot(round=rnd) if rnd == FINAL_ROUND:
                finals[msg.rank] = msg
            case Snapshot():
                coord.on_snapshot(msg)
            case Exiting(rank=r, error=error):
                exited.add(r)
                self._late_events += msg.events
                coord.on_exiting(msg)
                if error:
                    errors.append((r, error))

    def _collect_finals(self, finals, errors, exited) -> None:
        """Wait for every surviving rank's final snapshot (bounded)."""
        deadline = time.monotonic() + self.spec.timeout
        failed = {r for r, _ in errors}
        while len(exited | failed) < self.world and time.monotonic() < deadline:
            # A rank the supervising process saw die (or stopped for a silent heartbeat) sends
            # nothing more: take its death report instead of waiting the timeout for it.
            for rank, error in self._deaths(exited):
                exited.add(rank)
                if rank not in failed:
                    errors.append((rank, error))
                    failed.add(rank)
            try:
                msg = self.channel.inbox.get(timeout=0.05)
            except queue.Empty:
                continue
            self._dispatch(msg, time.monotonic(), finals, [], exited, [0.0] * self.world)
            if isinstance(msg, Exiting) and msg.error and msg.rank not in failed:
                errors.append((msg.rank, msg.error))
                failed.add(msg.rank)
