"""Where the ranks come from: a launcher's environment, processes we spawn, or none (one device)."""

from __future__ import annotations

import os
import pickle
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from flodl.train.errors import TrainerConfigError
from flodl.train.metrics import EpochMetrics
from flodl.train.runtime import FINAL_KEY, rank_main, run_single, wait_final
from flodl.train.spec import TrainSpec
from flodl.train.state import TrainedState, TrainingError
from flodl.train.transport import KeyStream

LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def under_launcher() -> bool:
    """True inside ``torchrun`` (or any c10d launcher): the group is already described by env vars."""
    return all(v in os.environ for v in LAUNCHER_VARS) and int(os.environ["WORLD_SIZE"]) > 1


def resolve_devices(requested: list[str] | None) -> list[str]:
    """The devices to train on: the request, else every CUDA device, else the CPU."""
    if requested:
        for d in requested:
            try:
                torch.device(d)
            except RuntimeError as err:
                raise TrainerConfigError(f"unknown device {d!r}: {err}") from None
        return list(requested)
    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        return [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return ["cuda:0" if torch.cuda.is_available() else "cpu"]


def check_picklable(spec: TrainSpec) -> None:
    """Spawned ranks import the factories by name: lambdas and closures cannot cross."""
    for name in (
        "model_factory",
        "optim_factory",
        "train_step",
        "dataset",
        "checkpoint_fn",
        "epoch_fn",
        "scheduler_factory",
    ):
        value = getattr(spec, name)
        try:
            pickle.dumps(value)
        except Exception as err:
            raise TrainerConfigError(
                f"{name} cannot be sent to the training processes ({err}). Multi-device training runs one "
                "process per device: pass module-level functions (not lambdas, closures or objects defined "
                "in __main__ of an interactive session), or launch with torchrun"
            ) from None


class MetricsFeed:
    """Reads published :class:`EpochMetrics` in order and hands them to a callback and a queue."""

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
            self._on_epoch(metrics)
            self.queue.put(metrics)

    def close(self) -> None:
        self._reader.stop()
        self._raw.put(None)
        self._pump.join(timeout=5)


def _spawn_entry(rank: int, world: int, spec: TrainSpec, host: str, port: int, device: str) -> None:
    try:
        rank_main(rank, world, spec, host, port, device)
    except TrainingError:
        sys.exit(1)  # the parent reports the failing rank's traceback once
    except BaseException:
        details = traceback.format_exc()
        try:
            dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=5)).set(
                f"crash/{rank}", details
            )
        except Exception:
            sys.stderr.write(details)
        sys.exit(1)


class SpawnedRun:
    """One process per device on this machine, supervised from the calling process."""

    def __init__(
        self, spec: TrainSpec, devices: list[str], on_epoch: Callable[[EpochMetrics], None]
    ) -> None:
        check_picklable(spec)
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
                args=(r, self.world, spec, "127.0.0.1", port, d),
                name=f"flodl-rank-{r}",
                daemon=True,
            )
            for r, d in enumerate(devices)
        ]
        for p in self.processes:
            p.start()
        self._result: TrainedState | None = None
        self._error: BaseException | None = None
        self._done = False

    def join(self) -> TrainedState:
        if not self._done:
            self._done = True
            try:
                self._result = self._supervise()
            except BaseException as err:
                self._error = err
            finally:
                self._reap(kill=self._error is not None)
                self.feed.close()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def _supervise(self) -> TrainedState:
        grace: float | None = None
        while True:
            if self.store.check([FINAL_KEY]):
                return wait_final(self.store, 0)
            dead = [
                (r, p.exitcode) for r, p in enumerate(self.processes) if p.exitcode not in (None, 0)
            ]
            if dead and grace is None:
                grace = (
                    time.monotonic() + 1.0
                )  # give the coordinator a moment to publish the failure
            if grace is not None and time.monotonic() > grace:
                rank, code = dead[0]
                details = ""
                if self.store.check([f"crash/{rank}"]):
                    details = self.store.get(f"crash/{rank}").decode()
                raise TrainingError(
                    f"rank {rank} exited with code {code}", rank=rank, details=details
                )
            if all(p.exitcode == 0 for p in self.processes) and not self.store.check([FINAL_KEY]):
                raise TrainingError("every rank exited but no final state was published")
            time.sleep(0.05)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes if p.pid is not None]

    def _reap(self, *, kill: bool) -> None:
        """Wait for the ranks to exit; after a failure, do not wait on survivors stuck in a collective."""
        deadline = time.monotonic() + (0.5 if kill else 10.0)
        for p in self.processes:
            p.join(timeout=max(deadline - time.monotonic(), 0.05))
        for p in self.processes:
            if p.is_alive():
                p.kill()
                p.join(timeout=5)


def run_under_launcher(spec: TrainSpec, on_epoch: Callable[[EpochMetrics], None]) -> TrainedState:
    """Every rank of a torchrun job calls this; each returns the same averaged state."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = f"cuda:{local}" if torch.cuda.is_available() else "cpu"
    if not dist.is_initialized():
        dist.init_process_group(
            "nccl" if device.startswith("cuda") else "gloo", timeout=timedelta(seconds=spec.timeout)
        )
    host = os.environ["MASTER_ADDR"]
    master = None
    if rank == 0:  # a control store of our own, next to the group's
        master = dist.TCPStore(
            host, 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=spec.timeout)
        )
    port_box = [master.port if master is not None else 0]
    dist.broadcast_object_list(port_box, src=0)
    port = port_box[0]
    feed = MetricsFeed(host, port, on_epoch) if rank == 0 else None
    try:
        return rank_main(rank, world, spec, host, port, device)
    finally:
        if feed is not None:
            feed.close()
        if master is None:
            dist.TCPStore(host, port, is_master=False).add("released", 1)
        else:  # keep the control store alive until every rank has read the result
            master.add("released", 1)
            deadline = time.monotonic() + spec.timeout
            while master.add("released", 0) < world and time.monotonic() < deadline:
                time.sleep(0.05)


def run_local(
    spec: TrainSpec, device: str, on_epoch: Callable[[EpochMetrics], None]
) -> TrainedState:
    return run_single(spec, torch.device(device), on_epoch)
