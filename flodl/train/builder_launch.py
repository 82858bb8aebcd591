"""How Builder mode starts its ranks: under a launcher, as processes it spawns, or in-process."""

from __future__ import annotations

import io
import os
import pickle
import queue
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from flodl.log import get_logger, set_verbosity, verbosity
from flodl.monitor import timeline
from flodl.train.averaging import final_state
from flodl.train.builder_runtime import (
    COORDINATOR_LOST_KEY,
    FINAL_KEY,
    rank_main,
    run_single,
    survivor_key,
    wait_final,
)
from flodl.train.checkpointing import SaveFdl
from flodl.train.errors import CoordinatorGoneError, TrainerConfigError, rank_failure
from flodl.train.metrics import EpochMetrics, RankEvents
from flodl.train.process_group import init_launched_group
from flodl.train.resume import (
    ResumePoint,
    job_token,
    restart_attempt,
    restarts_allowed,
    resume_point,
)
from flodl.train.self_launch import die_with_parent, existing_cuda_device
from flodl.train.train_spec import TrainSpec
from flodl.train.trained_state import TrainedState, TrainingError
from flodl.train.transport import KeyStream, heartbeat_key, heartbeat_timeout, progress_key

log = get_logger("flodl.train")


def resolve_devices(requested: list[str] | None) -> list[str]:
    """The devices to train on: the request, else every CUDA device, else the CPU."""
    if requested:
        for d in requested:
            try:
                device = torch.device(d)
            except RuntimeError as err:
                raise TrainerConfigError(f"unknown device {d!r}: {err}") from None
            if device.type == "cuda":
                existing_cuda_device(d, device, "Trainer.builder")
        return list(requested)
    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        return [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return ["cuda:0" if torch.cuda.is_available() else "cpu"]


_SENT_FIELDS = (
    "model_factory",
    "optim_factory",
    "train_step",
    "dataset",
    "checkpoint_fn",
    "epoch_fn",
    "scheduler_factory",
)


def pickled_spec(spec: TrainSpec) -> bytes:
    """The spec as spawned ranks receive it; a clear error for what they could not rebuild.

    Spawned ranks import functions and classes by name. Lambdas and closures cannot be pickled at
    all; things defined in ``__main__`` pickle fine but only import in the child when ``__main__``
    is a file (``python train.py``, ``python -m pkg``) — not under ``python -c``, from stdin or in
    a REPL/notebook, where the child would die unpickling them with no useful message.
    """
    main_ok = _main_is_importable()
    for name in _SENT_FIELDS:
        value = getattr(spec, name)
        try:
            found = _main_references(value)
        except Exception as err:
            raise TrainerConfigError(
                f"{name} cannot be sent to the training processes ({err}) — multi-device training "
                "runs one process per device: pass module-level functions (not lambdas or "
                "closures), or launch with torchrun"
            ) from None
        if found and not main_ok:
            raise TrainerConfigError(
                f"{name} uses {found[0]}, defined in __main__ of {_main_kind()}, which the training "
                "processes cannot import — move it into a module (a .py file) and import it from "
                "there, or run a script file (python train.py), or launch with torchrun"
            )
    return pickle.dumps(spec)


def _main_is_importable() -> bool:
    main = sys.modules.get("__main__")
    if main is None:
        return False
    if getattr(getattr(main, "__spec__", None), "name", None):
        return True  # python -m package.module
    path = getattr(main, "__file__", None)
    return path is not None and Path(path).is_file()


def _main_kind() -> str:
    arg = sys.argv[0] if sys.argv else ""
    if arg == "-c":
        return "a `python -c` command"
    if arg == "-":
        return "a script read from stdin"
    return "an interactive session"


def _main_references(value: object) -> list[str]:
    """Names of the ``__main__`` functions and classes that pickling ``value`` refers to."""
    found: list[str] = []

    class Finder(pickle.Pickler):
        def persistent_id(self, obj: object) -> None:
            if isinstance(obj, (type, types.FunctionType)) and obj.__module__ == "__main__":
                found.append(getattr(obj, "__qualname__", repr(obj)))

    Finder(io.BytesIO()).dump(value)
    return found


class MetricsFeed:
    """Reads published :class:`EpochMetrics` in order and hands them to a callback and a queue;
    the timeline events ranks emitted after their last epoch (:class:`RankEvents`) go to this
    process's running Timelines."""

    def __init__(self, host: str, port: int, on_epoch: Callable[[EpochMetrics], None]) -> None:
        self.queue: queue.Queue = queue.Queue()
        self._raw: queue.Queue = queue.Queue()
        self._on_epoch = on_epoch
        self._reader = KeyStream(host, port, "metrics", self._raw)
        self._pump = threading.Thread(target=self._run, name="flodl-metrics", daemon=True)
        self._pump.start()

    def _run(self) -> None:
        while True:
            metrics = self._raw.get()
            if metrics is None:
                return
            if isinstance(metrics, RankEvents):  # what ranks emitted after their last epoch
                timeline.deliver(metrics.events)
                continue
            self._on_epoch(metrics)
            self.queue.put(metrics)

    def close(self) -> None:
        self._reader.stop()
        self._raw.put(None)
        self._pump.join(timeout=5)


def _spawn_entry(
    rank: int,
    world: int,
    payload: bytes,
    host: str,
    port: int,
    device: str,
    parent: int,
    level: int | None,
) -> None:
    # A rank outliving its parent would wait on the parent's store for minutes: die with it.
    die_with_parent(parent)
    # The parent's verbosity, fl.set_verbosity's too: importing flodl here read only the
    # environment (FLODL_VERBOSITY), which set_verbosity does not change.
    set_verbosity(level)
    reported: list[BaseException] = []

    def report(err: BaseException) -> None:
        if isinstance(err, TrainingError):
            return  # the coordinator's own verdict: the parent reports it once
        reported.append(err)
        _report_crash(host, port, rank, traceback.format_exc())

    try:
        # Unpickled here, not by multiprocessing, so a function this process cannot import is
        # reported through the crash channel like any other failure.
        spec = pickle.loads(payload)
        rank_main(rank, world, spec, host, port, device, on_crash=report)
    except TrainingError:
        sys.exit(1)  # the parent reports the failing rank's traceback once
    except BaseException as err:
        if not reported:  # raised before training started (unpickling, joining the group)
            report(err)
        sys.exit(1)


CRASH_ORDER_KEY = "crash-order"


def _report_crash(host: str, port: int, rank: int, details: str) -> None:
    """Tell the supervising process what this rank raised, numbered in the order reports arrive.

    Written before the rank tears anything down, so a report outranks what the failure then
    causes: its heartbeat stopping, its peers' collectives failing, a slow exit.
    """
    try:
        store = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=5))
        order = store.add(CRASH_ORDER_KEY, 1)
        store.set(f"crash/{rank}", f"{order}\n{details}")
    except Exception:
        sys.stderr.write(details)


def read_crash(store: dist.TCPStore, rank: int) -> tuple[int, str] | None:
    """(arrival order, traceback) of what ``rank`` reported raising, if it did."""
    if not store.check([f"crash/{rank}"]):
        return None
    order, _, details = store.get(f"crash/{rank}").decode().partition("\n")
    return int(order), details


# Failures a rank reports when a peer stopped under it: never the cause while another rank
# has a report of its own or died without one.
_CONSEQUENCES = ("CollectiveError", "Connection closed by peer", "Connection reset by peer")


def blame(
    failed: dict[int, int | None], crashes: dict[int, tuple[int, str]], stuck: set[int]
) -> int:
    """The rank that caused a failure, of the ranks ``failed`` (rank -> exit code, None while
    its process is still exiting). In order: the first report that is not a consequence of a
    peer stopping; a rank frozen (``stuck``) or killed (no report); the first report."""
    causes = sorted((o, r) for r, (o, d) in crashes.items() if r in failed and not _follows(d))
    if causes:
        return causes[0][1]
    silent = sorted(r for r in failed if r in stuck or r not in crashes)
    if silent:
        return silent[0]
    return min((o, r) for r, (o, _) in crashes.items() if r in failed)[1]


def _follows(details: str) -> bool:
    return any(mark in details for mark in _CONSEQUENCES)


class SpawnedRun:
    """One process per device on this machine, supervised from the calling process.

    A supervisor thread starts with the ranks: it watches for the result, for ranks that exit
    and for ranks whose heartbeat stops (a frozen process cannot report anything, and when it is
    rank 0 it takes the coordinator's own watchdog with it). When training ends — finished or
    failed — it stops every rank, delivers the last metrics and calls ``on_done(error)`` (None
    when training finished, else what ended it); ``join()`` only waits for it.
    """

    def __init__(
        self,
        spec: TrainSpec,
        devices: list[str],
        on_epoch: Callable[[EpochMetrics], None],
        on_done: Callable[[BaseException | None], None] = lambda error: None,
    ) -> None:
        payload = pickled_spec(spec)
        self.spec, self.world = spec, len(devices)
        self.store = dist.TCPStore(
            "127.0.0.1",
            0,
            is_master=True,
            wait_for_workers=False,
            timeout=timedelta(seconds=spec.timeout),
        )
        port = self.store.port
        self.feed = MetricsFeed("127.0.0.1", port, on_epoch)
        ctx = mp.get_context("spawn")
        self.processes = [
            ctx.Process(
                target=_spawn_entry,
                args=(r, self.world, payload, "127.0.0.1", port, d, os.getpid(), verbosity()),
                name=f"flodl-rank-{r}",
                daemon=True,
            )
            for r, d in enumerate(devices)
        ]
        self._result: TrainedState | None = None
        self._error: BaseException | None = None
        self._interrupted: BaseException | None = None  # Ctrl-C in join(): what ended the run
        self._on_done = on_done
        self._stuck: dict[int, str] = {}  # ranks stopped for a silent heartbeat: why
        # The supervisor thread starts the ranks: a rank dies when the thread that started it
        # ends (die_with_parent), and this one outlives them, whichever thread called run().
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="flodl-supervisor", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._start_error is not None:
            self._thread.join()
            self.feed.close()
            raise self._start_error

    def join(self) -> TrainedState:
        try:
            while self._thread.is_alive():
                self._thread.join(timeout=0.5)
        except BaseException as err:  # Ctrl-C while waiting: leave nothing running
            self._interrupted = err
            self._reap(kill=True)
            raise
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def _run(self) -> None:
        try:
            for p in self.processes:
                p.start()
        except BaseException as err:
            self._start_error = err
            self._reap(kill=True)
            return
        finally:
            self._started.set()
        try:
            self._result = self._supervise()
        except BaseException as err:
            self._error = err
        failed = self._error is not None
        try:
            if failed:  # stop survivors first: they may be stuck in a collective
                self._reap(kill=True)
            self.feed.close()  # every published epoch is delivered before the stream ends
        finally:
            self._on_done(self._interrupted or self._error)
            if not failed:  # the result is in: let the ranks finish exiting on their own
                self._reap(kill=False)

    def _supervise(self) -> TrainedState:
        grace: float | None = None
        beats = Heartbeats(self.store, self.world, self.spec.timeout)
        lagging = Lagging(self.store, self.spec.timeout)
        crashes: dict[int, tuple[int, str]] = {}  # rank -> (arrival order, traceback)
        suspects: dict[int, float] = {}  # silent ranks with no report yet: since when
        reported: set[int] = set()
        while True:
            if self.store.check([FINAL_KEY]):
                return wait_final(self.store, 0)
            for r in range(self.world):
                if r not in crashes and (crash := read_crash(self.store, r)) is not None:
                    crashes[r] = crash
            alive = [r for r, p in enumerate(self.processes) if p.exitcode is None]
            silent = dict(beats.silent(alive))
            # A rank that reported an exception and then went silent is exiting, not frozen;
            # one still beating may be finishing its part (rank 0's coordinator publishing).
            failed: dict[int, int | None] = {
                r: p.exitcode for r, p in enumerate(self.processes) if p.exitcode
            }
            failed.update({r: None for r in silent if r in crashes})
            for rank in sorted(failed):
                if rank not in reported:  # tell the coordinator: it stops the others and
                    reported.add(rank)  # publishes the survivors' average with the error
                    self.store.set(f"dead/{rank}", self._death_message(rank, failed[rank], crashes))
            if failed and grace is None:
                # Rank 0 (the coordinator) gone, or survivors that cannot finish: do not wait long.
                grace = time.monotonic() + (1.0 if 0 in failed else min(self.spec.timeout, 10.0))
            if grace is not None and (time.monotonic() > grace or not alive):
                if self.store.check([FINAL_KEY]):
                    return wait_final(self.store, 0)
                rank = blame(failed, crashes, set(self._stuck))
                message = self._death_message(rank, failed[rank], crashes)
                summary, _, details = message.partition("\n")
                partial, note = self._survivors(exclude=rank)
                if not details:  # killed, or stopped by us: the summary says it all
                    raise TrainingError(summary + note, rank=rank, partial=partial)
                raise rank_failure(rank, details, how=summary, note=note, partial=partial)
            if all(p.exitcode == 0 for p in self.processes) and not self.store.check([FINAL_KEY]):
                raise TrainingError("every rank exited but no final state was published")
            now = time.monotonic()
            for r in list(suspects):
                if r not in silent or r in crashes:
                    del suspects[r]
            frozen = [
                (r, t) for r, t in silent.items() if r not in crashes and r not in self._stuck
            ]
            for r, _ in frozen:
                suspects.setdefault(r, now)
            # Silence alone is confirmed for a moment: on a saturated machine a failing rank's
            # report may still be on its way, and the report names the real cause.
            confirmed = [(r, t) for r, t in frozen if now - suspects[r] >= SILENCE_CONFIRM_S]
            if not confirmed and not failed:
                confirmed = lagging.behind([r for r in alive if r not in self._stuck], now)
            if confirmed and not failed:
                rank, quiet = max(confirmed, key=lambda c: c[1])
                if rank in silent:
                    message = (
                        f"rank {rank} stopped responding: no heartbeat for {quiet:.0f} s (its "
                        "process is frozen or blocked in native code) — every rank was stopped; "
                        "if it was busy, give it longer with .timeout(seconds)"
                    )
                else:
                    message = (
                        f"rank {rank} made no progress for {self.spec.timeout:.0f} s while its "
                        "peers waited for it in a collective — every rank was stopped; if it "
                        "was busy, give it longer with .timeout(seconds)"
                    )
                if rank == 0:  # it hosts the coordinator: the survivors hand their replicas here
                    raise self._without_rank0(message)
                # Like a killed rank: the frozen one goes (its peers' collectives then fail at
                # once instead of at their timeout) and the coordinator averages the survivors.
                self._stuck[rank] = message
                reported.add(rank)
                self.store.set(f"dead/{rank}", message)
                self.processes[rank].kill()
            time.sleep(0.05)

    def _without_rank0(self, message: str) -> TrainingError:
        """The error for a frozen rank 0, with the survivors' average on ``.partial``.

        The coordinator (in rank 0's process) would have averaged them: instead the survivors
        are told the coordinator is lost — before rank 0 is killed, so a survivor whose
        collective then fails knows it too — and each hands in its replica (bounded wait)."""
        self.store.set(COORDINATOR_LOST_KEY, message)
        self.processes[0].kill()
        deadline = time.monotonic() + min(self.spec.timeout, 10.0)
        waiting = set(range(1, self.world))
        while waiting and time.monotonic() < deadline:
            for r in sorted(waiting):
                if self.store.check([survivor_key(r)]) or self.processes[r].exitcode is not None:
                    waiting.discard(r)  # handed in, or gone without handing anything in
            time.sleep(0.05)
        partial, note = self._survivors(exclude=0)
        return TrainingError(message + (note or RANK0_FROZEN), rank=0, partial=partial)

    def _survivors(self, exclude: int) -> tuple[TrainedState | None, str]:
        """The average of the replicas ranks handed in when a peer stopped under them (ranks in
        lockstep do, and any rank once rank 0 and its coordinator are lost), and a note saying
        so ("" when none did)."""
        finals = {
            r: pickle.loads(self.store.get(survivor_key(r)))
            for r in range(self.world)
            if r != exclude and self.store.check([survivor_key(r)])
        }
        partial = final_state(finals)
        if partial is None:
            return None, ""
        ranks = ", ".join(str(r) for r in sorted(finals))
        return partial, f". The survivors' average (rank {ranks}) is on .partial"

    def _death_message(
        self, rank: int, code: int | None, crashes: dict[int, tuple[int, str]]
    ) -> str:
        """``rank N exited with code C`` (or ``rank N failed`` while it is still exiting) and,
        below it, what the rank reported raising."""
        if rank in self._stuck:  # killed by us for not responding: say why
            return self._stuck[rank]
        details = crashes[rank][1] if rank in crashes else ""
        head = f"rank {rank} failed" if code is None else f"rank {rank} exited with code {code}"
        return head + (f"\n{details}" if details else "")

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes if p.pid is not None]

    def _reap(self, *, kill: bool) -> None:
        """Wait for the ranks to exit; after a failure, do not wait on survivors stuck in a collective."""
        deadline = time.monotonic() + (0.5 if kill else 10.0)
        started = [p for p in self.processes if p.pid is not None]
        for p in started:
            p.join(timeout=max(deadline - time.monotonic(), 0.05))
        for p in started:
            if p.is_alive():
                p.kill()
                p.join(timeout=5)


# How long a silent heartbeat must stay unexplained (no exception report, no exit) before the
# rank is taken for frozen.
SILENCE_CONFIRM_S = 2.0

RANK0_FROZEN = (
    ". No partial state: rank 0 hosts the coordinator, which gathers and averages the survivors' "
    "replicas, and no survivor could hand its replica in instead"
)


class Heartbeats:
    """The supervisor's view of every rank's heartbeat counter."""

    def __init__(self, store: dist.TCPStore, world: int, timeout: float) -> None:
        self._store = store
        self._limit = heartbeat_timeout(timeout)
        now = time.monotonic()
        self._seen = [(0, now) for _ in range(world)]

    def silent(self, ranks: list[int]) -> list[tuple[int, float]]:
        """(rank, seconds silent) of every rank silent past the limit.

        A rank counts only from its first beat: starting a process (imports, CUDA) may take long,
        and one that dies while starting is caught by its exit code."""
        now = time.monotonic()
        found = []
        for r in ranks:
            count = self._store.add(heartbeat_key(r), 0)
            last, since = self._seen[r]
            if count != last:
                self._seen[r] = (count, now)
            elif count > 0 and now - since > self._limit:
                found.append((r, now - since))
        return found


class Lagging:
    """The supervisor's view of lockstep ranks' progress (``progress/<rank>``, written by their
    heartbeat threads): ``"<collectives entered> <batches trained>"``."""

    def __init__(self, store: dist.TCPStore, timeout: float) -> None:
        self._store, self._timeout = store, timeout
        self._seen: dict[int, tuple[tuple[int, int], float]] = {}
        self._next = 0.0

    def behind(self, ranks: list[int], now: float) -> list[tuple[int, float]]:
        """(rank, seconds unchanged) of every rank that entered fewer collectives than a peer
        and has not moved for the run's timeout: its peers wait for it."""
        if now < self._next:
            return []
        self._next = now + 0.5
        latest: dict[int, tuple[int, int]] = {}
        for r in ranks:
            key = progress_key(r)
            if not self._store.check([key]):
                continue
            syncs, steps = (int(x) for x in self._store.get(key).split())
            latest[r] = (syncs, steps)
            seen = self._seen.get(r)
            if seen is None or seen[0] != latest[r]:
                self._seen[r] = (latest[r], now)
        if len(latest) < 2:
            return []
        ahead = max(syncs for syncs, _ in latest.values())
        return [
            (r, now - self._seen[r][1])
            for r, (syncs, _) in latest.items()
            if syncs < ahead and now - self._seen[r][1] >= self._timeout
        ]


def run_under_launcher(spec: TrainSpec, on_epoch: Callable[[EpochMetrics], None]) -> TrainedState:
    """Every rank of a torchrun job calls this; each returns the same averaged state.

    After a restart (``torchrun --max-restarts``) the run resumes from the newest checkpoint its
    ``checkpoint_every`` wrote in an earlier attempt (see :mod:`flodl.train.resume`).
    """
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = launched_device(spec.devices, world)
    if not dist.is_initialized():
        # As Graph mode: NCCL only when every device named is a GPU (gloo reduces CUDA too).
        named = spec.devices or [device]
        gpus = all(torch.device(d).type == "cuda" for d in named)
        init_launched_group("nccl" if gpus else "gloo", spec.timeout)
    # MASTER_ADDR is the address of the node hosting rank 0 (every node can reach it), also
    # when the launcher's rendezvous endpoint is elsewhere.
    host = os.environ["MASTER_ADDR"]
    master = None
    token = resume = None
    if rank == 0:  # a control store of our own, next to the group's
        master = dist.TCPStore(
            host, 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=spec.timeout)
        )
        token, resume = _resume_point(spec)
    box: list[Any] = [master.port if master is not None else 0, resume]
    dist.broadcast_object_list(box, src=0)  # only rank 0 reads the checkpoint directory
    port, resume = int(box[0]), box[1]
    feed = MetricsFeed(host, port, on_epoch) if rank == 0 else None
    gone = False
    try:
        return rank_main(
            rank,
            world,
            spec,
            host,
            port,
            device,
            watch_coordinator=True,
            local_world=int(os.environ.get("LOCAL_WORLD_SIZE", world)),
            resume=resume,
            resume_token=token,
        )
    except CoordinatorGoneError:
        gone = True  # rank 0's store would block every call: skip the release handshake
        raise
    finally:
        if feed is not None:
            feed.close()
        if not gone:
            _release(master, host, port, world, spec.timeout)


def launched_device(requested: list[str] | None, world: int) -> str:
    """A launched rank's device: ``requested[LOCAL_RANK]`` when ``.devices(...)`` names one per
    rank on this machine, else ``cuda:LOCAL_RANK`` (or the CPU without CUDA). Another count
    than the launcher's local ranks is a :class:`TrainerConfigError`, as in Graph mode; without
    ``LOCAL_WORLD_SIZE`` (srun, mpirun) only ``LOCAL_RANK`` must name one of them."""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if not requested:
        return f"cuda:{local}" if torch.cuda.is_available() else "cpu"
    if "LOCAL_WORLD_SIZE" not in os.environ:
        # The ranks per machine are unknown (the world may span machines): check what is known.
        if local >= len(requested):
            raise TrainerConfigError(
                f"Trainer.builder: devices names {len(requested)} device(s) but this rank's "
                f"LOCAL_RANK is {local} (world of {world}); pass one device per rank on a "
                "machine, or leave .devices(...) out to take cuda:LOCAL_RANK (or the CPU)"
            )
        return resolve_devices(requested)[local]
    local_world = int(os.environ["LOCAL_WORLD_SIZE"])
    if len(requested) != local_world:
        raise TrainerConfigError(
            f"Trainer.builder: devices names {len(requested)} device(s) but the launcher "
            f"started {local_world} rank(s) on this machine (world of {world}); pass one device "
            "per local rank, or leave .devices(...) out to take cuda:LOCAL_RANK (or the CPU)"
        )
    return resolve_devices(requested)[local]


def _resume_point(spec: TrainSpec) -> tuple[str | None, ResumePoint | None]:
    """Rank 0 of a job the launcher may restart: (this job's token, where to resume or None).

    Only ``checkpoint_every`` with the default writer is resumed: a custom ``fn`` saves somewhere
    the framework does not know, so a restart there starts again from epoch 0 (with a warning).
    """
    if not (restarts_allowed() and spec.checkpoint_every):
        return None, None
    save = spec.checkpoint_fn
    if not isinstance(save, SaveFdl):
        if restart_attempt() > 0:
            log.warning(
                "restart %d: checkpoint_every has a custom fn, so there is nothing the trainer "
                "can resume from — training starts again at epoch 0",
                restart_attempt(),
            )
        return None, None
    token = job_token(save)
    resume = resume_point(save, token, spec.epochs()) if restart_attempt() > 0 else None
    return token, resume


def _release(
    master: dist.TCPStore | None, host: str, port: int, world: int, timeout: float
) -> None:
    """Say this rank is done; rank 0 keeps its control store up until every rank has said so
    (until then a peer may still be reading the result)."""
    if master is None:
        dist.TCPStore(host, port, is_master=False).add("released", 1)
        return
    master.add("released", 1)
    deadline = time.monotonic() + timeout
    while master.add("released", 0) < world and time.monotonic() < deadline:
        time.sleep(0.05)


def run_local(
    spec: TrainSpec, device: str, on_epoch: Callable[[EpochMetrics], None]
) -> TrainedState:
    """One rank on one device; under ``torchrun --max-restarts`` with a world of one (one rank
    asked for, or an elastic job shrunk to one node) it resumes as a launched run does."""
    token, resume = _resume_point(spec)
    return run_single(spec, torch.device(device), on_epoch, resume=resume, resume_token=token)
