"""Graph mode: ``fl.Trainer.setup(model, ...)`` then your loop with ``model.step()``.

Every rank runs the user's script (SPMD). Under ``torchrun`` (or any c10d launcher) setup joins
the group, moves the model to the rank's device and broadcasts rank 0's parameters and buffers;
``model.step()`` then averages gradients (all_reduce SUM / world, flattened in buckets), broadcasts
buffers from rank 0 and steps the optimizer. Without a launcher it is plain single-device training.
Decisions and the differences from the original are in docs/ddp.md ("Graph mode").
"""

from __future__ import annotations

import atexit
import functools
import os
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parameter import UninitializedParameter

from flodl import checkpoint
from flodl.log import get_logger, set_rank
from flodl.monitor import timeline
from flodl.train.checkpointing import SaveFdl, flush_checkpoints, save_version
from flodl.train.collectives import average_gradients, broadcast_from_rank_zero
from flodl.train.config import TIMEOUT, integer, number
from flodl.train.errors import TrainerConfigError, naming_ranks
from flodl.train.graph_balance import Balancer, hinted_ratios
from flodl.train.graph_el_che import Cadence, DdpConfig, devices_differ
from flodl.train.local_step import LocalStep, check_lr_scale, check_scheduler
from flodl.train.process_group import (
    init_launched_group,
    is_lost_peer,
    is_timeout,
    leave_group,
    peer_timed_out,
    ranks_missing_from_collective,
    under_launcher,
)
from flodl.train.resume import (
    ResumePoint,
    job_token,
    load_model,
    rescale_lr,
    restart_attempt,
    restarts_allowed,
    resume_point,
    write_state,
)
from flodl.train.self_launch import (
    LAUNCHED_BY,
    LocalRanks,
    backend_for,
    can_relaunch,
    check_in,
    launch_local_ranks,
    resolve_devices,
)
from flodl.train.trained_state import TrainingError

log = get_logger("flodl.train")


def setup(
    model: nn.Module,
    replica_factory: Callable[[torch.device], nn.Module] | None,
    optim_factory: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] | None,
    *,
    scheduler: Any = None,
    lr_scale: float = 1.0,
    timeout: float = TIMEOUT,
    config: DdpConfig | None = None,
    devices: Any = None,
) -> GraphSession:
    """See :meth:`flodl.Trainer.setup`."""
    from flodl.graph import Graph
    from flodl.graph.training import attach

    if not isinstance(model, Graph):
        raise TrainerConfigError(
            f"Trainer.setup needs a flodl Graph (built with fl.FlowBuilder), got "
            f"{type(model).__name__}: Graph mode adds model.step() / model.epoch() to the graph "
            "itself. For any other nn.Module use fl.Trainer.builder(model_factory, optim_factory, "
            "train_step), where the framework runs the loop"
        )
    if replica_factory is not None and not callable(replica_factory):
        raise TrainerConfigError(
            f"Trainer.setup: replica_factory must be callable (device -> model) or None, got "
            f"{type(replica_factory).__name__}"
        )
    if optim_factory is not None and not callable(optim_factory):
        raise TrainerConfigError(
            "Trainer.setup: optim_factory must be callable (params -> optimizer) or None, got "
            f"{type(optim_factory).__name__}"
        )
    timeout = number("timeout", timeout, above=0.0)
    if config is not None and not isinstance(config, DdpConfig):
        raise TrainerConfigError(
            f"Trainer.setup: config must be an fl.DdpConfig, got {type(config).__name__}"
        )
    wanted = resolve_devices(devices)
    topology, local_ranks = _join_group(timeout, devices, wanted)
    session = GraphSession(topology, timeout)
    session.local_ranks = local_ranks
    if session.is_distributed:
        set_rank(session.rank)
        model.to(session.device)
        broadcast_from_rank_zero(list(model.parameters()) + list(model.buffers()), session.group)
        session.configure_el_che(config)
        log.info(
            "graph mode: rank %d of %d on %s, %s",
            session.rank,
            session.world_size,
            session.device,
            "El Che" if session.cadence is not None else "lockstep",
        )
    elif devices is not None and wanted:  # one device, named: the model goes there
        session.device = wanted[0]
        model.to(session.device)
        log.info("graph mode: one process, training on %s", session.device)
    else:
        session.device = model.device  # single device: the model stays where the user put it
        log.info("graph mode: one process, training on %s", model.device)
    optimizer = None
    if optim_factory is not None:
        optimizer = optim_factory(model.parameters())
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TrainerConfigError(
                "Trainer.setup: optim_factory must return a torch.optim.Optimizer, got "
                f"{type(optimizer).__name__}"
            )
    session.local = LocalStep(
        optimizer,
        scheduler=check_scheduler(scheduler, "Trainer.setup"),
        lr_scale=check_lr_scale(lr_scale),
        max_grad_norm=None if config is None else config.max_grad_norm,
    )
    model.train()
    attach(model, session)
    return session


def _join_group(
    timeout: float, devices: Any, wanted: list[torch.device] | None
) -> tuple[tuple[int, int, torch.device, Any] | None, LocalRanks | None]:
    """((rank, world, device, group) when the run has several ranks, else None; the ranks this
    process started, when it launched them itself)."""
    local_ranks = None
    if dist.is_available() and dist.is_initialized():
        world = dist.get_world_size()
        _check_launched_world(devices, wanted, world)
        device = _rank_device(wanted)
    elif under_launcher():
        world = int(os.environ["WORLD_SIZE"])
        _check_launched_world(devices, wanted, world)
        device = _rank_device(wanted)
        if wanted is not None:
            backend = backend_for(wanted)
        else:
            backend = "nccl" if device.type == "cuda" else "gloo"
        started_by_rank0 = LAUNCHED_BY in os.environ
        # This attempt's own store keys; a rank rank 0 started checks in first.
        init_launched_group(backend, timeout, before_join=check_in if started_by_rank0 else None)
        # A gloo group left to interpreter teardown aborts the rank now and then ("terminate
        # called without an active exception"): destroy it at exit, and hold no reference to it
        # (group=None means the default group) so nothing keeps it alive past that.
        atexit.register(functools.partial(leave_group, timeout=timeout))
        world = dist.get_world_size()
    elif wanted is not None and len(wanted) >= 2:
        if devices is None and not can_relaunch():
            # GPUs found, but a notebook or a REPL cannot be started again as other ranks:
            # train in this process on the model's own device, as before setup started ranks.
            warnings.warn(
                f"Trainer.setup: {len(wanted)} GPUs found, but this session cannot be started "
                "again as other ranks (an interactive session or a notebook): training in this "
                "process only; run the code as a script to use them all",
                stacklevel=3,
            )
            return None, None
        local_ranks = launch_local_ranks(wanted, timeout)
        # Runs before the started ranks are reaped; it stops waiting for one that died.
        atexit.register(
            functools.partial(leave_group, timeout=timeout, peer_failed=local_ranks.any_failed)
        )
        world, device = len(wanted), _rank_device(wanted)
    else:
        return None, None
    if world < 2:
        return None, local_ranks
    return (dist.get_rank(), world, device, None), local_ranks


def _check_launched_world(devices: Any, wanted: list[torch.device] | None, world: int) -> None:
    """Under a launcher, ``devices=`` names this machine's ranks' devices: one per local rank."""
    if devices is None or wanted is None:
        return
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    if len(wanted) != local_world:
        raise TrainerConfigError(
            f"Trainer.setup: devices names {len(wanted)} device(s) but the launcher started "
            f"{local_world} rank(s) on this machine (world of {world}); pass one device per "
            "local rank, or devices=None to take cuda:LOCAL_RANK (or the CPU)"
        )


def _rank_device(wanted: list[torch.device] | None) -> torch.device:
    """This rank's device: ``devices[LOCAL_RANK]`` when given, else cuda:LOCAL_RANK or the CPU."""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = wanted[local] if wanted is not None else _launcher_device()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


def _launcher_device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


class GraphSession:
    """The training state behind a Graph's ``step()`` (see ``flodl.graph.training``)."""

    def __init__(
        self, topology: tuple[int, int, torch.device, Any] | None, timeout: float = TIMEOUT
    ) -> None:
        self.training_step = 0
        self.timeout = timeout  # setup's: collectives, and the meeting before leaving the group
        self.local = LocalStep(None)  # the optimizer step, shared with Builder mode
        self.loader: Any = None
        self.cadence: Cadence | None = None
        self.local_ranks: LocalRanks | None = None  # the ranks this process started, if any
        self.balancer: Balancer | None = None  # lockstep with per-rank shares of each batch
        self._warned_nonfinite = False
        if topology is None:
            self.rank, self.world_size, self.group = 0, 1, None
            self.device = torch.device("cpu")
        else:
            self.rank, self.world_size, self.device, self.group = topology
        self.is_distributed = self.world_size > 1

    def configure_el_che(self, config: DdpConfig | None) -> None:
        """El Che on when a config asks for it, or, without one, when the ranks' devices differ
        (the original's rule: ``setup`` on heterogeneous GPUs, ``setup_with`` always). With El
        Che off, the auto-balancer splits each batch by throughput when the devices differ (or
        ``config.balance`` says so)."""
        differ = devices_differ(self.device, self.group)
        if config is None:
            if not differ:
                return
            config = DdpConfig()
        if config.el_che_enabled:
            self.cadence = Cadence(
                config.el_che(self.world_size),
                self.rank,
                self.device,
                self.group,
                local_steps=config.average == "params",
            )
        elif config.balance or (config.balance is None and differ):
            hint = config.speed_hint
            ratios = None
            if hint is not None and hint[0] < self.world_size:
                ratios = hinted_ratios(self.world_size, *hint)
            self.balancer = Balancer(self.rank, self.world_size, self.device, self.group, ratios)

    @property
    def chunk_ratios(self) -> list[float]:
        """Each rank's share of a batch: the auto-balancer's, else equal shares."""
        if self.balancer is not None:
            return list(self.balancer.chunk_ratios)
        return [1.0 / self.world_size] * self.world_size

    @property
    def throughput(self) -> list[float]:
        """Each rank's measured samples per ms, as of the last rebalance (the auto-balancer's;
        zeros without it or before its first rebalance)."""
        return (
            list(self.balancer.throughput)
            if self.balancer is not None
            else [0.0] * (self.world_size)
        )

    @property
    def el_che(self) -> Any:
        """The El Che state (batch counts, anchor) when El Che runs, else None."""
        return None if self.cadence is None else self.cadence.el_che

    # -------------------------------------------------------------- optimisation
    def step(self, graph: nn.Module) -> None:
        try:
            self._step(graph)
        except RuntimeError as err:  # torch.distributed's errors are RuntimeErrors
            if self.local_ranks is not None:
                failed = self.local_ranks.failed_peer(err)
            elif self.is_distributed and (
                is_timeout(err) or (is_lost_peer(err) and peer_timed_out())
            ):
                failed = self._stuck_ranks()
            else:
                failed = None
            if failed is not None:
                raise failed from err
            raise

    def _stuck_ranks(self) -> TrainingError | None:
        """After a collective timed out in a rank this process did not start: the error naming
        the ranks that never reached it, when the group's store can tell."""
        missing = ranks_missing_from_collective(self.timeout)
        if not missing:
            return None
        return naming_ranks(
            missing,
            f"a collective waited {self.timeout:g} s (Trainer.setup's timeout) for {{ranks}}, "
            "which never reached it (stuck in its own code, or far slower than the others); "
            f"rank {self.rank} stops here, and the launcher ends the others",
        )

    def _step(self, graph: nn.Module) -> None:
        if self.cadence is not None:
            if self.cadence.in_window:
                self.cadence.step(graph, lambda: self._optimizer_step(graph))
                return
            # A step outside model.epoch()'s windows: the loop feeds the model itself, so El Che
            # has no counts to run (the original disables it here too, on every rank alike).
            warnings.warn(
                "El Che is off for the rest of this run: model.step() was called outside "
                "model.epoch() — iterate model.epoch(e) to train with per-rank batch counts, or "
                "pass fl.DdpConfig(max_anchor=0) to run lockstep on purpose",
                stacklevel=3,
            )
            self.cadence = None
        if self.is_distributed:
            start = time.perf_counter()
            timeline.emit("sync_start", mode="graph")
            params = [p for p in graph.parameters() if p.requires_grad]
            if self.balancer is not None:
                self.balancer.average(params)
            else:
                average_gradients(params, self.world_size, self.group)
            broadcast_from_rank_zero(list(graph.buffers()), self.group)
            ms = (time.perf_counter() - start) * 1e3
            timeline.emit("sync_end", mode="graph", duration_ms=ms)
        self._optimizer_step(graph)

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        return self.local.optimizer

    @property
    def scheduler(self) -> Any:
        return self.local.scheduler

    @property
    def lr_scale(self) -> float:
        return self.local.lr_scale

    def _optimizer_step(self, graph: nn.Module) -> None:
        """The local part of a step: clip, scheduled LR, optimizer step, zero_grad."""
        if self.local.run(graph.parameters(), step=self.training_step):
            self.training_step += 1

    def finish(self) -> None:
        """Wait for this process's background checkpoint saves (raising the first failure, as
        ``fl.checkpoint.flush()``), then for every rank (at most setup's ``timeout``; past it,
        a warning, and this rank goes on), then release the group setup created;
        rank 0 of a run it started itself then waits for the other ranks to end, raising
        :class:`~flodl.TrainingError` for one that failed."""
        try:
            checkpoint.flush()
        finally:
            if self.is_distributed:
                started = self.local_ranks
                leave_group(
                    timeout=self.timeout,
                    peer_failed=started.any_failed if started is not None else None,
                )
            if self.local_ranks is not None:
                self.local_ranks.wait()

    def set_scheduler(self, scheduler: Any, lr_scale: float | None) -> None:
        self.local.configure(check_scheduler(scheduler, "set_scheduler"), lr_scale)

    def set_lr(self, lr: float) -> None:
        self.local.set_lr(lr)

    # -------------------------------------------------------------- data
    def set_data_loader(self, graph: nn.Module, loader: Any) -> None:
        from flodl.data import BatchSizeError, DataLoader, DataLoaderBuilder

        # With El Che every rank reads the whole epoch order and takes its share of each window,
        # with the auto-balancer its slice of each batch; else each rank iterates its own shard.
        whole = self.cadence is not None or self.balancer is not None
        rank, world = (0, 1) if whole else (self.rank, self.world_size)
        no_batches: BatchSizeError | None = None
        if isinstance(loader, DataLoaderBuilder):
            try:
                loader = loader.partition(rank, world).device(self.device).build()
            except BatchSizeError as exc:
                # A shard of 0 batches on some ranks only: raising here would leave the others
                # waiting in the batch-count all_reduce below until the timeout.
                if not self.is_distributed:
                    raise
                no_batches = exc
        if no_batches is not None:
            self._agree_on_batches(0, whole, no_batches)
        if not isinstance(loader, DataLoader):
            raise TrainerConfigError(
                f"set_data_loader: expected an fl.data.DataLoader or its builder "
                f"(fl.data.DataLoader.from_tensors(...).batch_size(n)), got {type(loader).__name__}"
            )
        if whole and loader.world_size != 1:
            what = "window" if self.cadence is not None else "batch"
            raise TrainerConfigError(
                f"set_data_loader: {'El Che' if self.cadence else 'the auto-balancer'} hands "
                f"each rank its share of every {what} from the whole dataset, but this loader "
                f"is partitioned (rank {loader.rank} of "
                f"{loader.world_size}) — build it without .partition(), or pass the builder unbuilt"
            )
        if not whole and (loader.rank, loader.world_size) != (
            self.rank,
            self.world_size,
        ):
            raise TrainerConfigError(
                f"set_data_loader: the loader is partitioned as rank {loader.rank} of "
                f"{loader.world_size} but this process is rank {self.rank} of {self.world_size} — "
                "build it with .partition() (or pass the builder, unbuilt, and setup partitions it)"
            )
        if self.is_distributed:
            self._agree_on_batches(len(loader), whole, None)
        self.loader = loader
        self._graph = weakref.ref(graph)

    def _agree_on_batches(self, count: int, whole: bool, error: Exception | None) -> None:
        """Every rank learns the fewest and most batches per epoch, and raises alike when they
        differ; ``error``: why this rank has none (its loader could not be built)."""
        counts = torch.tensor([count, -count], dtype=torch.int64, device=self.device)
        dist.all_reduce(counts, op=dist.ReduceOp.MAX, group=self.group)
        most, fewest = int(counts[0]), -int(counts[1])
        if most == fewest == 0 and error is not None:
            raise error  # the same on every rank
        empty = (
            " (a rank with 0 batches has no samples of its own: use fewer ranks, a smaller "
            "batch_size, or more data)"
            if fewest == 0
            else ""
        )
        if most != fewest and whole:
            raise TrainerConfigError(
                f"set_data_loader: the ranks' loaders hold {fewest} to {most} batches per "
                "epoch; El Che and the auto-balancer split one epoch order between ranks, so "
                f"every rank needs the same dataset and batch size{empty}"
            ) from error
        if most != fewest:
            raise TrainerConfigError(
                f"set_data_loader: ranks would run {fewest} to {most} batches per epoch; every "
                "model.step() is a collective, so all ranks need the same count — keep "
                f"drop_last(True) (the default) and no partition ratios{empty}"
            ) from error

    def epochs(
        self,
        graph: nn.Module,
        num_epochs: int,
        checkpoint_every: int | None = None,
        directory: str = "checkpoints",
    ) -> Iterator[int]:
        """``0 .. num_epochs-1``, checkpointing every ``checkpoint_every`` epochs (rank 0, after
        the loop's body of the epoch ran); after a ``torchrun`` restart, from the next epoch of
        the newest checkpoint of this job, with its model, optimizer state and training step,
        rescaled when the world size changed (see :mod:`flodl.train.resume`)."""
        num_epochs = integer("num_epochs", num_epochs, least=1)
        if checkpoint_every is not None:
            checkpoint_every = integer("checkpoint_every", checkpoint_every, least=1)
        if not isinstance(directory, str | os.PathLike):
            raise TrainerConfigError(f"directory must be a path, got {directory!r}")
        save = SaveFdl(str(directory))
        token = None
        if checkpoint_every is not None and restarts_allowed() and self.rank == 0:
            token = job_token(save)
        first = self._resume(graph, save, token, num_epochs) if checkpoint_every else 0
        for epoch in range(first, num_epochs):
            yield epoch
            if checkpoint_every and (epoch + 1) % checkpoint_every == 0 and self.rank == 0:
                version = epoch + 1

                def write(version: int, model: nn.Module, token: str | None = token) -> None:
                    save(version, model)
                    if token is not None:
                        write_state(
                            save,
                            version,
                            self.training_step,
                            self.optimizer,
                            token,
                            world=self.world_size,
                            lr_scale=self.lr_scale,
                            steps_per_epoch=self._steps_per_epoch(),
                        )

                save_version(write, version, graph)  # logs a failure; training goes on
        flush_checkpoints()

    def _resume(self, graph: nn.Module, save: SaveFdl, token: str | None, epochs: int) -> int:
        """The first epoch to train: 0, or after a restart the one after the newest checkpoint
        of this job, whose model and optimizer state rank 0 reads and every rank then takes."""
        if not restarts_allowed():
            return 0
        # Rank 0 decides for all: an elastic job's ranks may count restarts differently (a node
        # that joined starts at 0), and every rank must take the broadcast below alike.
        first = self.rank == 0 and restart_attempt() == 0
        point = resume_point(save, token, epochs) if self.rank == 0 and not first else None
        box: list[Any] = [point]
        if self.is_distributed:
            dist.broadcast_object_list(box, src=0, group=self.group)
        point = box[0]
        if point is None:
            return 0
        if self.rank == 0:
            load_model(graph, point.model_path)
        if self.is_distributed:
            broadcast_from_rank_zero(list(graph.parameters()) + list(graph.buffers()), self.group)
        if self.optimizer is not None and point.optimizer is not None:
            self.optimizer.load_state_dict(point.optimizer)  # rank 0's state, on every rank
            if self.scheduler is None:
                rescale_lr(self.optimizer, point, self.lr_scale)
        self.training_step = self._resumed_step(point)
        return point.version

    def _steps_per_epoch(self) -> int | None:
        """Each rank's optimizer steps per epoch, when known: one per batch of the loader given
        to ``model.set_data_loader`` (its shard, or the whole epoch the auto-balancer slices);
        None without one, or with El Che, whose per-rank counts follow the ranks' speeds."""
        if self.loader is None or self.cadence is not None:
            return None
        return len(self.loader)

    def _resumed_step(self, point: ResumePoint) -> int:
        """The checkpoint's training step, rescaled when the world changed since it was written:
        a rank's steps per epoch depend on the world size, and a step-based scheduler must stand
        where it would in an uninterrupted run at this size (same fraction of the run done)."""
        step = point.global_step
        if point.world is None or point.world == self.world_size:
            return step
        then, now = point.steps_per_epoch, self._steps_per_epoch()
        if then and now:
            rescaled = round(step * now / then)
            if self.rank == 0:
                log.warning(
                    "restart %d: the checkpoint was written by a world of %d, this run has %d: "
                    "training step %d (%d per epoch) becomes %d (%d per epoch at this size)",
                    restart_attempt(),
                    point.world,
                    self.world_size,
                    step,
                    then,
                    rescaled,
                    now,
                )
            return rescaled
        if self.rank == 0:
            log.warning(
                "restart %d: the checkpoint was written by a world of %d, this run has %d, and "
                "its steps per epoch at either size are unknown (%s): the training step stays "
                "%d, so a step-based scheduler is off by about %d/%d from here on",
                restart_attempt(),
                point.world,
                self.world_size,
                "El Che sets per-rank counts"
                if self.cadence is not None
                else "no model.set_data_loader before model.epochs"
                if self.loader is None
                else "the checkpoint did not record them",
                step,
                point.world,
                self.world_size,
            )
        return step

    def epoch(self, epoch: int) -> Any:
        if self.loader is None:
            raise TrainerConfigError(
                "model.epoch(): no data loader — call model.set_data_loader(loader) first"
            )
        graph = self._graph()
        batches: Any
        if self.balancer is not None:
            batches = SlicedEpoch(self.loader.epoch(epoch), self.balancer)
        elif self.cadence is None or graph is None:
            batches = self.loader.epoch(epoch)
        else:
            step = lambda: self._optimizer_step(graph)  # noqa: E731
            batches = self.cadence.epoch(self.loader, epoch, graph, step)
        return _EpochEnd(batches, epoch, lambda: self._check_finite(graph, epoch))

    def _check_finite(self, graph: nn.Module | None, epoch: int) -> None:
        """After an epoch: warn (rank 0, once) when the parameters are no longer finite. Once
        per epoch, not per step: a step would pay a host sync for it. The ranks' parameters
        are averaged, so one rank's NaN reaches every rank; none can tell which had it first."""
        if self._warned_nonfinite or graph is None or self.rank != 0:
            return
        try:
            if _all_finite(graph.parameters()):
                return
        except Exception as exc:  # a diagnostic: it must not end the user's epoch loop
            log.debug("graph mode: could not check the parameters after epoch %d: %s", epoch, exc)
            return
        self._warned_nonfinite = True
        log.warning(
            "graph mode: the parameters are not finite after epoch %d (training step %d)%s — "
            "lower the learning rate or clip gradients (fl.DdpConfig(max_grad_norm=...)); "
            "training goes on",
            epoch,
            self.training_step,
            ": a NaN or inf loss on some rank was averaged into every rank"
            if self.is_distributed
            else "",
        )


def _all_finite(params: Iterable[torch.Tensor]) -> bool:
    """Whether every initialized parameter is finite: one host sync per device (parameters may
    live on several, which one ``torch.stack`` refuses); lazy ones hold no values yet."""
    flags: dict[torch.device, list[torch.Tensor]] = {}
    for p in params:
        if isinstance(p, UninitializedParameter) or p.numel() == 0:
            continue
        flags.setdefault(p.device, []).append(torch.isfinite(p.detach()).all())
    return all(bool(torch.stack(f).all()) for f in flags.values())


class _Batches:
    """An epoch's batches as given: ``len``, ``with`` and other attributes pass through."""

    def __init__(self, batches: Any) -> None:
        self._batches = batches

    def __len__(self) -> int:
        return len(self._batches)

    def __enter__(self) -> Any:
        enter = getattr(self._batches, "__enter__", None)
        if enter is not None:
            enter()
        return self

    def __exit__(self, *exc: object) -> Any:
        leave = getattr(self._batches, "__exit__", None)
        return leave(*exc) if leave is not None else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batches, name)


class SlicedEpoch(_Batches):
    """An epoch read whole, each batch cut to this rank's slice (the auto-balancer's)."""

    def __init__(self, batches: Any, balancer: Balancer) -> None:
        super().__init__(batches)
        self._balancer = balancer

    def __iter__(self) -> Iterator[Any]:
        return self._balancer.epoch(iter(self._batches))


class _EpochEnd(_Batches):
    """An epoch's batches, plus the timeline's ``epoch_end`` event once iteration has consumed
    them all."""

    def __init__(self, batches: Any, epoch: int, at_end: Callable[[], None]) -> None:
        super().__init__(batches)
        self._epoch = epoch
        self._at_end = at_end

    def __iter__(self) -> Iterator[Any]:
        yield from self._batches
        self._at_end()
        timeline.emit("epoch_end", epoch=self._epoch)
