"""One rank's training: batches, local optimizer steps, and the control messages in between.

The loop: wait for a plan while handling control messages; per batch run the user's
``train_step`` → backward → clip → scheduler LR → step → zero_grad → report timing → handle
control. Control is polled after every batch and while waiting for anything, so a peer's
collective never waits on a rank that is idle.
"""

from __future__ import annotations

import math
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import torch

from flodl.data.batch import Batch
from flodl.data.sampling import make_partition
from flodl.data.sources import as_source, require_samples
from flodl.errors import _renamed
from flodl.log import TRACE, get_logger
from flodl.monitor import timeline
from flodl.train import step_context
from flodl.train.checkpointing import flush_checkpoints, save_version
from flodl.train.errors import CollectiveError, failed_at
from flodl.train.local_step import LocalStep
from flodl.train.messages import (
    ApplyPolicy,
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
from flodl.train.metrics import MetricsMsg

# ``CollectiveFailed`` was this module's name for CollectiveError; it still resolves, with a warning.
__getattr__ = _renamed(__name__, {"CollectiveFailed": CollectiveError})

log = get_logger("flodl.train")

FINAL_ROUND = -1


class Channel(Protocol):
    """The worker's side of the transport."""

    def send(self, msg: Any) -> None: ...
    def poll(self) -> list[ControlMsg]: ...
    def wait(self, timeout: float) -> ControlMsg | None: ...


class Collective(Protocol):
    def average_(self, flat: torch.Tensor, weight: float) -> None: ...


class Worker:
    """A model, its optimizer and the user's train step, on one device."""

    def __init__(
        self,
        *,
        rank: int,
        world: int,
        device: torch.device,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        train_step: Callable[[torch.nn.Module, Batch], torch.Tensor],
        dataset: Any,
        batch_size: int,
        seed: int,
        policy: ApplyPolicy = ApplyPolicy.SYNC,
        scheduler: Any = None,
        lr_scale: float = 1.0,
        max_grad_norm: float | None = None,
        epoch_fn: Callable[[int, Worker], None] | None = None,
        checkpoint_fn: Callable[[int, torch.nn.Module], None] | None = None,
        max_batches: int | None = None,
        channel: Channel | None = None,
        collective: Collective | None = None,
        sample_resources: bool = False,
    ) -> None:
        self.rank, self.world, self.device = rank, world, device
        self.model, self.optimizer, self.train_step = model, optimizer, train_step
        # Any dataset flodl.data accepts: tensors, a dict of tensors, a torch / flodl Dataset, an
        # object with get_batch(indices).
        self.source = as_source(dataset)
        self.dataset_size = require_samples(self.source)
        self.batch_size, self.seed = batch_size, seed
        self.policy = policy
        # Clip, learning rate, optimizer step and zero-grad: the same routine as Graph mode.
        self.local = LocalStep(
            optimizer, scheduler=scheduler, lr_scale=lr_scale, max_grad_norm=max_grad_norm
        )
        self.epoch_fn, self.checkpoint_fn = epoch_fn, checkpoint_fn
        self.max_batches = max_batches
        self._epoch_batches: dict[int, int] = {}  # batches run per epoch, for max_batches
        self.idle_ms = 0.0  # waiting since the last report: for a plan, an averaging, a throttle
        self._last_report = time.perf_counter()
        self._sampler = None
        if sample_resources:  # for a monitor: this process's CPU, memory and GPU, per report
            from flodl.monitor.resources import ResourceSampler

            self._sampler = ResourceSampler(gpu=device.type == "cuda")
        self.channel, self.collective = channel, collective
        self.local_step = 0
        self._warned_nonfinite = False
        self.global_step = 0
        self._counted = 0  # the local steps included in global_step
        self.steps_since_avg = 0
        self.version = 0
        self.current_epoch: int | None = None
        self.plans: deque[EpochPlan] = deque()
        self.ctx = step_context.WorkerContext(rank=rank, world_size=world, device=device)
        step_context.install(self.ctx)

    # -- one batch -------------------------------------------------------------------------------

    def train_batch(self, batch: Batch) -> tuple[float, float]:
        """Forward + loss (the user's step), backward, clip, LR, optimizer step. Returns (loss, ms)."""
        start = time.perf_counter()
        step = self.schedule_step
        self.ctx.lr = self.local.prepare(step)
        loss = self.train_step(self.model, batch)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise TypeError(
                f"train_step must return a scalar loss tensor, got {type(loss).__name__}"
                + (f" of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else "")
            )
        value = float(loss.detach())  # the host sync this costs is paid already
        if not math.isfinite(value) and not self._warned_nonfinite:
            self._warned_nonfinite = True  # once: every later step would say it again
            log.warning(
                "rank %d: the loss is %s at local step %d (epoch %s)%s — lower the learning "
                "rate or clip gradients (.max_grad_norm); training goes on",
                self.rank,
                value,
                self.local_step,
                self.current_epoch,
                ", and averaging spreads it to every replica" if self.world > 1 else "",
            )
        self.local.run(self.model.parameters(), step=step, loss=loss)
        self.local_step += 1
        self.steps_since_avg += 1
        self.ctx.local_step = self.local_step
        return value, (time.perf_counter() - start) * 1e3

    @property
    def schedule_step(self) -> int:
        """The step a scheduler is queried at: every rank's batches up to the last averaging
        (the coordinator's count) plus this rank's batches since then. It only grows, also when
        an averaging resets :attr:`steps_since_avg` before the new global count arrives."""
        return self.global_step + self.local_step - self._counted

    def set_global_step(self, step: int, counted: int | None = None) -> None:
        """The global step as of an averaging, which counted this rank's first ``counted`` local
        steps (default: all of them so far)."""
        self.global_step = step
        self._counted = self.local_step if counted is None else counted
        self.ctx.global_step = step

    def resources(self) -> dict[str, Any]:
        """This process's CPU, memory and GPU now, if a monitor asked for them (else empty)."""
        return self._sampler.sample().to_json() if self._sampler is not None else {}

    def fetch(self, indices: torch.Tensor) -> Batch:
        """The samples at ``indices`` on this rank's device, addressable by position and name."""
        # in memory of its own: a step changing the batch in place leaves the dataset alone
        fields = self.source.fetch_to(indices, self.device)
        return Batch(list(fields), self.source.names)

    # -- plans -----------------------------------------------------------------------------------

    def run_plan(self, plan: EpochPlan) -> MetricsMsg | None:
        """Train every full batch of the plan; None if a Shutdown arrived mid-plan."""
        if plan.epoch != self.current_epoch:
            self.current_epoch = plan.epoch
            self.ctx.epoch = plan.epoch
            if self.epoch_fn is not None:
                self.epoch_fn(plan.epoch, self)
        indices = make_partition(
            plan.offset, plan.size, self.dataset_size, plan.epoch, seed=self.seed
        )
        n_batches = len(indices) // self.batch_size
        if self.max_batches is not None:  # per epoch, however many chunks the epoch comes in
            done = self._epoch_batches.get(plan.epoch, 0)
            n_batches = min(n_batches, max(self.max_batches - done, 0))
            self._epoch_batches[plan.epoch] = done + n_batches
        start = time.perf_counter()
        loss_sum = 0.0
        tracing = log.isEnabledFor(TRACE)
        for b in range(n_batches):
            batch = self.fetch(indices[b * self.batch_size : (b + 1) * self.batch_size])
            loss, ms = self.train_batch(batch)
            loss_sum += loss
            if tracing:
                log.log(TRACE, "epoch %d batch %d: loss %.6g (%.2f ms)", plan.epoch, b, loss, ms)
            if self.channel is not None:
                self.channel.send(BatchTiming(self.rank, ms, self.local_step, loss))
                waited = time.perf_counter()
                stop = self.handle_all(self.channel.poll())
                self.idle_ms += (time.perf_counter() - waited) * 1e3
                if stop == "shutdown":
                    return None
        idle, self.idle_ms = self.idle_ms, 0.0
        log.debug(
            "epoch %d: %d batches, mean loss %.6g, %.1f ms (%.1f ms waiting)",
            plan.epoch,
            n_batches,
            loss_sum / n_batches if n_batches else 0.0,
            (time.perf_counter() - start) * 1e3,
            idle,
        )
        now = time.perf_counter()
        wall, self._last_report = (now - self._last_report) * 1e3, now
        return MetricsMsg(
            rank=self.rank,
            epoch=plan.epoch,
            avg_loss=loss_sum / n_batches if n_batches else 0.0,
            batches=n_batches,
            epoch_ms=(time.perf_counter() - start) * 1e3,
            samples=plan.size,  # the whole slice is done, including a dropped partial tail
            scalars=step_context.drain_scalars(),
            device_index=self.device.index or 0,
            resources=self.resources(),
            idle_ms=idle,
            wall_ms=wall,
            events=forwarded_events(),
        )

    # -- control ---------------------------------------------------------------------------------

    def handle_all(self, messages: list[ControlMsg]) -> str | None:
        for msg in messages:
            if self.handle(msg) == "shutdown":
                return "shutdown"
        return None

    def handle(self, msg: ControlMsg) -> str | None:
        match msg:
            case StartEpoch(plan=plan):
                self.plans.append(plan)
            case SyncNow(version=version):
                self._collective_average(version)
            case RequestParams(round=rnd):
                self._send_snapshot(rnd)
            case Update():
                self.load_state(msg.params, msg.buffers)
                self.version = msg.version
                self.steps_since_avg = 0
            case SetGlobalStep(step=step, counted=counted):
                self.set_global_step(step, counted[self.rank] if counted else None)
            case Checkpoint(version=version):
                if self.checkpoint_fn is not None and self.rank == 0:
                    save_version(self.checkpoint_fn, version, self.model)
            case Throttle():
                return self._throttled()
            case Shutdown():
                return "shutdown"
        return None

    def _throttled(self) -> str | None:
        """Block (handling messages) until the next averaging releases this rank."""
        assert self.channel is not None
        while True:
            msg = self.channel.wait(timeout=1.0)
            if msg is None or isinstance(msg, Throttle):
                continue
            if self.handle(msg) == "shutdown":
                return "shutdown"
            if isinstance(msg, (SyncNow, Update)):
                return None

    def wait_for_plan(self) -> EpochPlan | None:
        assert self.channel is not None
        while not self.plans:
            msg = self.channel.wait(timeout=1.0)
            if msg is not None and self.handle(msg) == "shutdown":
                return None
        return self.plans.popleft()

    def run(self) -> None:
        """The rank's whole life under a coordinator: plans until Shutdown, then the final snapshot."""
        assert self.channel is not None
        self._last_report = time.perf_counter()
        try:
            while True:
                waited = time.perf_counter()
                plan = self.wait_for_plan()
                self.idle_ms += (time.perf_counter() - waited) * 1e3
                if plan is None:
                    break
                metrics = self.run_plan(plan)
                if metrics is None:
                    break
                self.channel.send(metrics)
        except BaseException as err:
            if isinstance(err, CollectiveError):
                self._send_snapshot(FINAL_ROUND)
            error = _describe(err, self)
            self.channel.send(Exiting(self.rank, error=error, events=forwarded_events()))
            raise
        # The last checkpoint's background write ends (and emits its event) before this rank
        # says it is done, so the events sent with Exiting include it.
        flush_checkpoints()
        self._send_snapshot(FINAL_ROUND)
        self.channel.send(Exiting(self.rank, events=forwarded_events()))

    # -- state -----------------------------------------------------------------------------------

    def params(self) -> list[torch.Tensor]:
        return [p.detach() for p in self.model.parameters()]

    def buffers(self) -> list[torch.Tensor]:
        return [b.detach() for b in self.model.buffers()]

    def snapshot(self, rnd: int = FINAL_ROUND) -> Snapshot:
        """A CPU copy of this rank's replica, weighted by the batches it trained since the last
        averaging (at least 1)."""
        return Snapshot(
            rank=self.rank,
            round=rnd,
            params=[p.cpu().clone() for p in self.params()],
            buffers=[b.cpu().clone() for b in self.buffers()],
            batch_count=max(self.steps_since_avg, 1),
        )

    def _send_snapshot(self, rnd: int) -> None:
        assert self.channel is not None
        self.channel.send(self.snapshot(rnd))

    def load_state(self, params: list[torch.Tensor], buffers: list[torch.Tensor]) -> None:
        own_params, own_buffers = self.params(), self.buffers()
        if len(params) != len(own_params) or len(buffers) != len(own_buffers):
            raise ValueError(
                f"rank {self.rank}: averaged state has {len(params)} params / {len(buffers)} buffers, "
                f"the model has {len(own_params)} / {len(own_buffers)}"
            )
        with torch.no_grad():
            for mine, new in zip([*own_params, *own_buffers], [*params, *buffers], strict=True):
                mine.copy_(new.to(mine.device, non_blocking=True))

    def _collective_average(self, version: int) -> None:
        assert self.collective is not None and self.channel is not None
        start = time.perf_counter()
        timeline.emit("sync_start", mode="builder", version=version)
        params = self.params()
        flat = torch.nn.utils.parameters_to_vector(params)
        before = flat.clone() if self.policy is not ApplyPolicy.SYNC else None
        # Weighted by batches trained since the last average: a rank that barely trained (a late
        # start, a slow device) must not drag the average back towards where it started.
        try:
            self.collective.average_(flat, float(max(self.steps_since_avg, 1)))
        except Exception as err:
            raise CollectiveError(
                f"rank {self.rank}: averaging version {version} failed ({err}) — a peer stopped"
            ) from err
        torch.nn.utils.vector_to_parameters(flat, list(self.model.parameters()))
        divergence = None
        if before is not None:
            norm = float(flat.norm())
            divergence = float((before - flat).norm()) / norm if norm > 1e-10 else 0.0
        self.version = version
        self.steps_since_avg = 0
        sync_ms = (time.perf_counter() - start) * 1e3
        timeline.emit("sync_end", mode="builder", version=version, duration_ms=sync_ms)
        log.debug("sync %d: %.2f ms", version, sync_ms)
        self.channel.send(SyncAck(self.rank, version, self.local_step, divergence, sync_ms))


def forwarded_events() -> list[dict[str, Any]]:
    """The timeline events this rank process collected since the last call (when forwarding)."""
    forwarded = timeline.forwarder()
    return forwarded.drain() if forwarded is not None else []


def _describe(err: BaseException, worker: Worker) -> str:
    """The traceback the coordinator reports, with where the rank failed (also noted on the
    exception, so the rank's own crash report says it too)."""
    err.add_note(failed_at(worker.rank, worker.local_step, worker.current_epoch))
    return "".join(traceback.format_exception(err))
