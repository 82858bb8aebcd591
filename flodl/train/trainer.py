"""``fl.Trainer``: one training loop on CPU, one GPU, N (mixed) GPUs or N machines.

Builder mode — the framework owns the loop::

    handle = (fl.Trainer.builder(make_model, make_optimizer, train_step)
              .dataset(data).batch_size(32).num_epochs(10)
              .run())
    state = handle.join()        # averaged parameters and buffers

With one device it trains in the calling process. With ``devices=[...]`` of two or more (or two
or more GPUs found) it runs one process per device on ``torch.distributed`` — gloo on CPUs, NCCL on
GPUs — and the replicas are averaged on the chosen :class:`ApplyPolicy` cadence: Sync and Cadence
in lockstep over collectives (:mod:`flodl.train.lockstep`), Async and the CPU backend under a
coordinator thread in rank 0. Under ``torchrun`` every rank runs the same script and joins the
launched group.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from flodl.data.sources import as_source, require_samples
from flodl.log import get_logger
from flodl.monitor import timeline
from flodl.train import config as cfg
from flodl.train.builder_launch import (
    SpawnedRun,
    launched_device,
    resolve_devices,
    run_local,
    run_under_launcher,
)
from flodl.train.builder_runtime import built_scheduler, coordinator_for
from flodl.train.checkpointing import SaveFdl, flush_checkpoints
from flodl.train.errors import TrainerConfigError
from flodl.train.graph_el_che import DdpConfig
from flodl.train.graph_mode import GraphSession
from flodl.train.graph_mode import setup as setup_graph
from flodl.train.messages import ApplyPolicy, AverageBackend
from flodl.train.metrics import EpochMetrics
from flodl.train.process_group import under_launcher
from flodl.train.train_spec import TrainSpec
from flodl.train.trained_state import TrainedState

log = get_logger("flodl.train")


class TrainingHandle:
    """A running (or finished) training: metrics as they arrive, and the final state."""

    def __init__(self, world_size: int, devices: list[str]) -> None:
        self.world_size = world_size
        self.devices = devices
        self.pids: list[int] = []  # spawned rank processes, if any
        self.history: list[EpochMetrics] = []
        self._queue: queue.Queue[EpochMetrics | None] = queue.Queue()
        self._join: Callable[[], TrainedState] | None = None
        self._state: TrainedState | None = None
        self._lock = threading.Lock()

    def _on_epoch(self, metrics: EpochMetrics) -> None:
        self.history.append(metrics)
        self._queue.put(metrics)

    def _end_stream(self) -> None:
        """Training is over (finished or failed): after the epochs queued so far, None."""
        self._queue.put(None)

    def next_metrics(self, timeout: float | None = None) -> EpochMetrics | None:
        """The next aggregated epoch, waiting for it; None once training is over (finished or
        failed, with or without :meth:`join`) or after ``timeout`` seconds without one.

        ``while (m := handle.next_metrics()) is not None: ...`` follows a run to its end."""
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is None:
            self._queue.put(None)
        return item

    def poll_metrics(self) -> list[EpochMetrics]:
        """Every epoch aggregated since the last call, without blocking."""
        out: list[EpochMetrics] = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return out
            if item is None:
                self._queue.put(None)
                return out
            out.append(item)

    def join(self) -> TrainedState:
        """Wait for the end of training and return the averaged state.

        A failed run raises :class:`fl.TrainingError` naming the rank, with its traceback in
        ``.details`` and the surviving ranks' averaged state in ``.partial`` (None if none
        survived) — the original returned that partial state instead, with a warning."""
        with self._lock:
            if self._state is None:
                assert self._join is not None
                try:
                    self._state = self._join()
                finally:
                    self._queue.put(None)
            return self._state


class TrainerBuilder:
    """Fluent configuration of a training run; every setter returns the builder."""

    def __init__(
        self, model_factory: Callable, optim_factory: Callable, train_step: Callable
    ) -> None:
        self._spec = TrainSpec(
            cfg.function("model_factory", model_factory, signature="device -> nn.Module"),
            cfg.function("optim_factory", optim_factory, signature="params -> Optimizer"),
            cfg.function("train_step", train_step, signature="(model, batch) -> loss"),
        )
        self._monitor: Any = None
        self._metrics_fn: Callable[[EpochMetrics], Any] | None = None

    @property
    def spec(self) -> TrainSpec:
        """The settings so far (what every rank receives)."""
        return self._spec

    def _set(self, **values: Any) -> TrainerBuilder:
        for name, value in values.items():
            setattr(self._spec, name, value)
        return self

    def _el_che(self, **knobs: Any) -> TrainerBuilder:
        """A new El Che config with ``knobs`` changed: checked by :class:`ElCheConfig`."""
        return self._set(el_che=dataclasses.replace(self._spec.el_che, **knobs))

    # data and schedule
    def dataset(self, data: Any) -> TrainerBuilder:
        """Anything ``fl.data`` accepts — a tensor, a tuple or dict of tensors, a torch or flodl
        Dataset (``fl.data.MNIST(...)``), an object with ``get_batch(indices)`` — or a zero-argument
        factory returning one (built in each process). ``train_step`` receives an
        :class:`fl.data.Batch`: unpack it (``x, y = batch``) or index fields by name."""
        return self._set(dataset=data)

    def batch_size(self, n: int) -> TrainerBuilder:
        """Per-device batch size."""
        return self._set(batch_size=cfg.integer("batch_size", n, least=1))

    def num_epochs(self, n: int) -> TrainerBuilder:
        return self._set(num_epochs=cfg.integer("num_epochs", n, least=1))

    def seed(self, seed: int) -> TrainerBuilder:
        """Seed of the per-epoch sample permutation (default 42)."""
        return self._set(seed=cfg.integer("seed", seed))

    # devices and averaging
    def devices(self, devices: list[str]) -> TrainerBuilder:
        """Explicit devices, e.g. ``["cuda:0", "cuda:1"]``; ``["cpu", "cpu"]`` forces two CPU ranks."""
        if isinstance(devices, str) or not devices:
            raise TrainerConfigError(
                f"devices: give a list of at least one device, e.g. ['cpu'], got {devices!r}"
            )
        for d in devices:
            if not isinstance(d, str | torch.device):
                raise TrainerConfigError(f"devices: {d!r} is not a device name such as 'cuda:0'")
        return self._set(devices=[str(d) for d in devices])

    def policy(self, policy: ApplyPolicy) -> TrainerBuilder:
        return self._set(policy=_member("policy", ApplyPolicy, policy))

    def backend(self, backend: AverageBackend) -> TrainerBuilder:
        return self._set(backend=_member("backend", AverageBackend, backend))

    def anchor(self, n: int) -> TrainerBuilder:
        """Batches the slowest rank runs per averaging window at the start (default 10)."""
        return self._el_che(anchor=n)

    def max_anchor(self, n: int) -> TrainerBuilder:
        """Cap of the anchor (default 200)."""
        return self._el_che(max_anchor=n)

    def overhead_target(self, fraction: float) -> TrainerBuilder:
        """Averaging cost El Che tolerates, as a fraction of compute time (clamped to
        [0.01, 0.50]); above it the anchor grows."""
        return self._el_che(overhead_target=fraction)

    def divergence_threshold(self, threshold: float) -> TrainerBuilder:
        """Replica divergence above which a rising trend stops the Async overshoot growing."""
        return self._set(
            divergence_threshold=cfg.number("divergence_threshold", threshold, least=0.0)
        )

    def no_divergence_guard(self) -> TrainerBuilder:
        return self._set(divergence_guard=False)

    def max_batch_diff(self, n: int) -> TrainerBuilder:
        """CPU backend: a rank more than ``n`` batches ahead of the slowest since the last
        averaging waits for it (0 = lockstep); El Che's per-rank counts move by at most ``n`` per
        calibration (both backends)."""
        return self._el_che(max_batch_diff=n)

    def max_overshoot(self, n: int) -> TrainerBuilder:
        """Progressive dispatch: how many batches past its El Che count a rank may run into the
        next epoch before it waits for the next averaging (default: auto-tuned, 2..15)."""
        return self._set(max_overshoot=cfg.integer("max_overshoot", n, least=0))

    def progressive_dispatch(self, on: bool) -> TrainerBuilder:
        return self._set(progressive=cfg.flag("progressive_dispatch", on))

    def partition_ratios(self, ratios: list[float]) -> TrainerBuilder:
        """Fixed per-epoch data split, one ratio per rank; needs ``progressive_dispatch(False)``
        with Cadence or Async."""
        if isinstance(ratios, str) or not hasattr(ratios, "__iter__"):
            raise TrainerConfigError(f"partition_ratios must be a list of numbers, got {ratios!r}")
        values = [cfg.number("partition_ratios entry", r, least=0.0) for r in ratios]
        return self._set(partition_ratios=values)

    def speed_hint(self, slow_rank: int, ratio: float) -> TrainerBuilder:
        """Seed El Che before it measures: rank ``slow_rank`` is the slow one, the others run
        ``ratio`` times its batches. The first measurement corrects a wrong hint."""
        return self._el_che(speed_hint=(slow_rank, ratio))

    # optimisation
    def scheduler(self, factory: Callable[[int], Any]) -> TrainerBuilder:
        """``factory(world_size)`` returns an object with ``.lr(step)`` (or a ``step -> lr``
        function), queried with the global step (batches of every rank added up). Pass the
        factory, not a scheduler: ``.scheduler(fl.optim.CosineScheduler(...))`` is refused at once
        with the fix, as each rank builds its own."""
        checked = cfg.factory(
            "scheduler",
            factory,
            signature="world_size -> scheduler",
            product="scheduler",
            attribute="lr",
        )
        return self._set(scheduler_factory=checked)

    def lr_scale_ratio(self, ratio: float) -> TrainerBuilder:
        """LR × (1 + (world − 1) · ratio). Default 0: no scaling (the original defaulted to 1)."""
        return self._set(lr_scale_ratio=cfg.number("lr_scale_ratio", ratio, least=0.0))

    def max_grad_norm(self, norm: float) -> TrainerBuilder:
        """Clip every rank's gradients to this L2 norm after backward, before the step."""
        return self._set(max_grad_norm=cfg.number("max_grad_norm", norm, above=0.0))

    # callbacks, checkpoints, monitor
    def epoch_fn(self, fn: Callable[[int, Any], None]) -> TrainerBuilder:
        """``fn(epoch, worker)`` in every rank before its first batch of each epoch."""
        return self._set(epoch_fn=cfg.function("epoch_fn", fn, signature="(epoch, worker) -> None"))

    def checkpoint_every(
        self,
        n: int,
        fn: Callable[[int, torch.nn.Module], None] | None = None,
        *,
        directory: str = "checkpoints",
    ) -> TrainerBuilder:
        """Every ``n`` global epochs checkpoint rank 0's model (version = epochs done).

        By default writes ``<directory>/checkpoint-<version>.fdl`` atomically; pass
        ``fn(version, model)`` to do something else. Errors are logged; training continues.
        """
        every = cfg.integer("checkpoint_every", n, least=1)
        if fn is not None:
            cfg.function("checkpoint_fn", fn, signature="(version, model) -> None")
        self._set(checkpoint_every=every)
        return self._set(checkpoint_fn=fn if fn is not None else SaveFdl(str(directory)))

    def checkpoint_fn(self, fn: Callable[[int, torch.nn.Module], None]) -> TrainerBuilder:
        checked = cfg.function("checkpoint_fn", fn, signature="(version, model) -> None")
        return self._set(checkpoint_fn=checked)

    def metrics_fn(self, fn: Callable[[EpochMetrics], Any]) -> TrainerBuilder:
        """Called once per aggregated epoch in the calling process (errors are logged)."""
        self._metrics_fn = cfg.function("metrics_fn", fn, signature="(EpochMetrics) -> None")
        return self

    def monitor(self, monitor: Any) -> TrainerBuilder:
        """A :class:`flodl.Monitor`; every aggregated epoch is logged to it, with each rank's
        resources (CPU, memory, GPU) when there are several ranks."""
        self._monitor = monitor
        return self._set(monitor_resources=monitor is not None)

    def threads_per_rank(self, n: int) -> TrainerBuilder:
        """Intra-op threads of each CPU rank (default: the machine's cores split between ranks)."""
        return self._set(threads_per_rank=cfg.integer("threads_per_rank", n, least=1))

    def timeout(self, seconds: float) -> TrainerBuilder:
        """How long a collective or a silent rank may stall before the run fails (default 60 s)."""
        return self._set(timeout=cfg.number("timeout", seconds, above=0.0))

    def snapshot_timeout(self, seconds: float) -> TrainerBuilder:
        """CPU backend: how long an averaging round waits for every rank's snapshot before it
        is abandoned and retried later (default 5 s)."""
        return self._set(snapshot_timeout=cfg.number("snapshot_timeout", seconds, above=0.0))

    # run
    def _validate(self) -> TrainSpec:
        spec = self._spec
        for name in ("dataset", "batch_size", "num_epochs"):
            if getattr(spec, name) is None:
                raise TrainerConfigError(
                    f"Trainer.builder: {name} is required — call .{name}(...) before .run()"
                )
        return spec

    def run(self) -> TrainingHandle:
        """Start training. One device: trains now and returns a finished handle. Several: returns at
        once; ``handle.join()`` waits. A monitor is finished when training ends, failed or not:
        a run ended by an exception (which propagates unchanged) is reported as failed or
        interrupted (``Monitor.finish(error=...)``), not complete. A monitor counting another
        number of epochs than ``num_epochs``, or starting after epoch 0, is refused here, before
        anything trains."""
        spec = self._validate()
        metrics_fn, monitor = self._metrics_fn, self._monitor
        _check_monitor_epochs(monitor, spec)
        started = time.monotonic()
        log.info(
            "trainer: %d epochs, batch size %d per device, policy %s",
            spec.epochs(),
            spec.batch_size,
            spec.policy.name.lower() if hasattr(spec.policy, "name") else spec.policy,
        )
        if hasattr(monitor, "ends_smoke_runs"):
            monitor.ends_smoke_runs = False  # this run keeps to the smoke budget itself

        spec.timeline_events = timeline.timelines_running()

        def on_epoch(metrics: EpochMetrics) -> None:
            timeline.deliver(metrics.events)  # what spawned ranks forwarded with this epoch
            timeline.emit("epoch_end", epoch=metrics.epoch, loss=metrics.avg_loss)
            handle._on_epoch(metrics)
            if metrics_fn is not None:
                _guarded(metrics_fn, metrics)
            if monitor is not None:
                if hasattr(monitor, "add_rank_resources"):
                    for rank, sample in enumerate(metrics.per_rank_resources):
                        if sample:  # sampled by the rank itself, in its own process
                            _guarded(monitor.add_rank_resources, rank, sample)
                _guarded(
                    monitor.log, metrics.epoch, metrics.epoch_ms / 1e3, metrics.monitor_metrics()
                )

        def finish(error: BaseException | None) -> None:
            """The end of training; ``error`` is what ended it early (it propagates after)."""
            flush_checkpoints()  # background saves of this process, before the monitor's end
            how = "ended" if error is None else f"stopped by {type(error).__name__}"
            log.info("trainer: training %s after %.1f s", how, time.monotonic() - started)
            if monitor is not None and hasattr(monitor, "finish"):
                if error is not None and _takes_keyword(monitor.finish, "error"):
                    # Said as failed or interrupted, not "training complete".
                    _guarded(monitor.finish, error=error)
                else:
                    _guarded(monitor.finish)

        if under_launcher():
            rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
            launched_device(spec.devices, world)  # .devices(...) agrees with the launcher's
            check_for_world(spec, world)
            handle = TrainingHandle(world, [])
            # Every rank runs the script; only rank 0 logs epochs, so only rank 0 finishes.
            finish_here = finish if rank == 0 else (lambda error: None)
            state = _finishing(finish_here, run_under_launcher, spec, on_epoch)
            handle._end_stream()
            handle._join = lambda: state
            return handle
        devices = resolve_devices(spec.devices)
        log.info("trainer: %d device(s): %s", len(devices), ", ".join(map(str, devices)))
        check_for_world(spec, len(devices))
        handle = TrainingHandle(len(devices), devices)
        if len(devices) == 1:
            state = _finishing(finish, run_local, spec, devices[0], on_epoch)
            handle._end_stream()
            handle._join = lambda: state
            return handle

        def done(error: BaseException | None) -> None:  # the supervisor's last act
            handle._end_stream()
            finish(error)

        spawned = _finishing_on_error(finish, SpawnedRun, spec, devices, on_epoch, done)
        handle.pids = spawned.pids
        handle._join = spawned.join
        return handle


def _check_monitor_epochs(monitor: Any, spec: TrainSpec) -> None:
    """The Trainer decides how many epochs run; a monitor counting others would refuse the
    epochs past its count (silently: a monitor failure never stops training) or show a wrong
    ETA and total. Refused before training starts, with the fix."""
    counted = getattr(monitor, "num_epochs", None)
    if isinstance(counted, bool) or not isinstance(counted, int):
        return
    first = getattr(monitor, "start_epoch", 0)
    if isinstance(first, int) and not isinstance(first, bool) and first != 0:
        # The Trainer trains from epoch 0 (a restarted job's resumed epochs are logged as they
        # come): the monitor would refuse every epoch before its start, silently.
        raise TrainerConfigError(
            f"monitor: fl.Monitor({counted}, start_epoch={first}) starts at epoch {first}, but "
            "the trainer logs every epoch from 0 — build it without start_epoch; nothing was "
            "trained"
        )
    if counted == spec.num_epochs:
        return
    raise TrainerConfigError(
        f"monitor: fl.Monitor({counted}) counts {counted} epochs, but the trainer runs "
        f"num_epochs({spec.num_epochs}) — build it with fl.Monitor({spec.num_epochs}), or pass "
        "the same number to both; nothing was trained"
    )


def _guarded(fn: Callable, *args: Any, **kwargs: Any) -> None:
    """Run a user callback; a failing one is reported and training goes on."""
    try:
        fn(*args, **kwargs)
    except Exception:
        log.exception("%s failed; training goes on", getattr(fn, "__qualname__", repr(fn)))


def _takes_keyword(fn: Callable, name: str) -> bool:
    """Whether ``fn`` accepts the keyword ``name`` (a monitor standing in for fl.Monitor may
    have a plain ``finish()``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.kind is p.VAR_KEYWORD or (p.name == name and p.kind is not p.POSITIONAL_ONLY)
        for p in params
    )


def _finishing(finish: Callable[[BaseException | None], None], fn: Callable, *args: Any) -> Any:
    """``fn(*args)``, then ``finish`` with the exception that ended it, if any (re-raised)."""
    try:
        result = fn(*args)
    except BaseException as err:
        finish(err)
        raise
    finish(None)
    return result


def _finishing_on_error(
    finish: Callable[[BaseException | None], None], fn: Callable, *args: Any
) -> Any:
    try:
        return fn(*args)
    except BaseException as err:
        finish(err)
        raise


class Trainer:
    """Entry points: :meth:`builder` (the framework runs the loop) and :meth:`setup` (you do)."""

    @staticmethod
    def setup(
        model: torch.nn.Module,
        replica_factory: Callable[[torch.device], torch.nn.Module] | None,
        optim_factory: Callable[[Any], torch.optim.Optimizer] | None,
        *,
        scheduler: Any = None,
        lr_scale: float = 1.0,
        timeout: float = cfg.TIMEOUT,
        config: DdpConfig | None = None,
        devices: Any = None,
    ) -> GraphSession:
        """Graph mode: prepare ``model`` (an ``fl.Graph``) for your own loop ending in ``model.step()``.

        Every rank runs your script. With two or more devices (``devices=[...]``, or every GPU
        found when ``devices`` is None) and no launcher, setup starts the other ranks itself: it
        runs your command line again once per other device, and this process becomes rank 0.
        Under ``torchrun`` (or any c10d launcher) the launcher started them, and ``devices``, if
        given, names one device per local rank. Setup then joins the group (NCCL when every rank
        is on a GPU, else gloo), moves the model to the rank's device and copies rank 0's
        parameters and buffers to every rank; ``model.step()`` averages gradients and syncs
        buffers before the optimizer step. With one device it is single-device training: the
        model stays where it is (or goes to the one device named). ``devices=["cpu", "cpu"]``
        runs two CPU ranks (docs/multi-gpu.md, "Graph mode without torchrun"). ``replica_factory(device)`` is accepted for the original's signature but not
        called: in one process per rank, each rank's script builds its own model (it may be None).
        ``optim_factory(params)`` builds the optimizer (None: ``step()`` only syncs gradients).
        ``scheduler`` (``.lr(step)`` or ``step -> lr``) sets the LR at every step, × ``lr_scale``
        × a param group's ``"lr_scale"``; without one, ``lr_scale`` multiplies the optimizer's own
        rates once, here (the one rule of every mode: docs/ddp.md, "One local step").
        ``timeout`` bounds every collective. ``config`` (:class:`~flodl.DdpConfig`) turns on El
        Che, per-rank batch counts for mixed devices, which is otherwise on only when the ranks'
        devices differ (see docs/ddp.md, "El Che in Graph mode"). Returns the session (also
        reachable through the model).

        >>> import torch, flodl as fl
        >>> from torch import nn
        >>> model = fl.FlowBuilder(nn.Linear(4, 1)).build()
        >>> _ = fl.Trainer.setup(model, None, lambda p: torch.optim.SGD(p, lr=0.1))
        >>> model(torch.ones(2, 4)).pow(2).mean().backward()
        >>> model.step(); model.training_step, model.world_size
        (1, 1)
        """
        return setup_graph(
            model,
            replica_factory,
            optim_factory,
            scheduler=scheduler,
            lr_scale=lr_scale,
            timeout=timeout,
            config=config,
            devices=devices,
        )

    @staticmethod
    def setup_head(
        model: torch.nn.Module,
        optim_factory: Callable[[Any], torch.optim.Optimizer],
        *,
        param_groups: dict[str, Any] | None = None,
        scheduler: Any = None,
        lr_scale: float = 1.0,
        timeout: float = cfg.TIMEOUT,
        config: DdpConfig | None = None,
        devices: Any = None,
    ) -> GraphSession:
        """Graph mode for a task model (a ``flodl.hf`` head, or any ``fl.Graph``): the same loop
        on CPU, one GPU or N ranks, ending in ``model.step()``.

        As :meth:`setup` with no replica factory (each rank loads its own copy), plus what
        fine-tuning wants: the optimizer gets only the parameters that train (frozen ones, e.g.
        after ``model.freeze("embeddings")``, are left out), or, with ``param_groups``
        (``{path: lr or options}``), one group per label path through
        :func:`fl.optim.param_groups` (frozen parameters left out of every group).

        >>> import torch, flodl as fl
        >>> from torch import nn
        >>> model = fl.FlowBuilder(nn.Linear(4, 4)).tag("body").through(nn.Linear(4, 1)).build()
        >>> _ = model.freeze("body")
        >>> session = fl.Trainer.setup_head(model, lambda p: torch.optim.AdamW(p, lr=1e-3))
        >>> sum(len(g["params"]) for g in session.optimizer.param_groups)
        2
        """
        from flodl.optim import param_groups as groups_by_path

        if not callable(optim_factory):
            raise TrainerConfigError(
                "Trainer.setup_head: optim_factory must be callable (params -> optimizer), got "
                f"{type(optim_factory).__name__}"
            )

        def trainable(params: Any) -> torch.optim.Optimizer:
            if param_groups is not None:
                groups = []
                for group in groups_by_path(model, param_groups):
                    kept = [p for p in group["params"] if p.requires_grad]
                    if kept:
                        groups.append({**group, "params": kept})
                return optim_factory(groups)
            return optim_factory([p for p in params if p.requires_grad])

        return setup_graph(
            model,
            None,
            trainable,
            scheduler=scheduler,
            lr_scale=lr_scale,
            timeout=timeout,
            config=config,
            devices=devices,
        )

    @staticmethod
    def builder(
        model_factory: Callable, optim_factory: Callable, train_step: Callable
    ) -> TrainerBuilder:
        """``model_factory(device) -> nn.Module``, ``optim_factory(params) -> Optimizer``,
        ``train_step(model, batch) -> scalar loss`` (the framework does backward and the step)."""
        return TrainerBuilder(model_factory, optim_factory, train_step)


def check_for_world(spec: TrainSpec, world: int) -> None:
    """Everything the ranks would reject, checked before any process starts: a mistake fails
    ``run()`` at once with its own message, not a rank seconds later. The multi-rank knobs (El
    Che, partition ratios) are checked only when there are several ranks: on one device they do
    not apply, so a script written for several GPUs still runs on a laptop."""
    built_scheduler(spec, world)  # a factory returning a number fails here, not in a rank
    if world < 2:
        return
    # The coordinator the run would build checks ratios, El Che knobs and the dataset's size;
    # a dataset factory is built in the ranks only, so its size is checked there.
    n = None if spec.dataset_is_factory else require_samples(as_source(spec.dataset))
    coordinator_for(spec, world, n if n is not None else (spec.batch_size or 1) * world)


def _member(knob: str, kind: type[enum.Enum], value: Any) -> Any:
    """``value`` as a member of the enum ``kind`` (the member or its value)."""
    try:
        return kind(value)
    except ValueError:
        names = ", ".join(f"{kind.__name__}.{m.name}" for m in kind)
        raise TrainerConfigError(f"{knob} must be one of {names}, got {value!r}") from None
