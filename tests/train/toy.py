"""Module-level factories for Trainer tests (spawned ranks import them by name)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import torch
from torch import nn

from flodl.train import step_context

TRUE_W = torch.tensor([[2.0, -1.0, 0.5, 3.0]])


def regression_data(n: int = 512, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = x @ TRUE_W.T + 0.01 * torch.randn(n, 1, generator=g)
    return x, y


def make_model(device) -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(4, 1).to(device)


class _Scale(nn.Module):
    """One weight: ``x.sum(1) * w``."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(1, keepdim=True) * self.w


def make_scalar_model(device) -> nn.Module:
    """A model of one weight: fewer values to average than ranks (gloo then closes a timed-out
    rank's connections to peers still waiting in the same all-reduce)."""
    return _Scale().to(device)


def make_model_with_buffer(device) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(4, 1)).to(device)


def make_sgd(params) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.05)


def mse_step(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    x, y = batch
    return nn.functional.mse_loss(model(x), y)


SLOW_RANK_MS = (20.0, 60.0)  # rank 0, rank 1: rank 1 is 3x slower


def slow_rank1_step(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    """Rank 1 is 3x slower per batch: heterogeneous devices on one CPU. The sleeps dominate the
    compute (well under a millisecond), so the ratio holds when other processes load the machine."""
    time.sleep(SLOW_RANK_MS[step_context.current().rank] / 1e3)
    return mse_step(model, batch)


WARM_UP_S = 2.0  # rank 1's first batch: a device's start, thousands of batches' worth


def warm_up_rank1_step(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    """Rank 1's first batch takes :data:`WARM_UP_S` longer (a device still starting up); every
    other batch, on both ranks, takes what the tiny model takes (well under a millisecond)."""
    if step_context.current().rank == 1 and not getattr(warm_up_rank1_step, "done", False):
        warm_up_rank1_step.done = True  # type: ignore[attr-defined]
        time.sleep(WARM_UP_S)
    return mse_step(model, batch)


INJECTED_AT = "FLODL_TEST_INJECTED_AT"


def _mark_injection() -> None:
    """Write the wall-clock time of an injected fault to $FLODL_TEST_INJECTED_AT (if set)."""
    if path := os.environ.get(INJECTED_AT):
        Path(path).write_text(repr(time.time()))


def failing_step(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    ctx = step_context.current()
    if ctx.rank == 1 and ctx.local_step == 3:
        _mark_injection()
        raise ValueError("injected failure in train_step")
    return mse_step(model, batch)


def failing_rank0_step(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    ctx = step_context.current()
    if ctx.rank == 0 and ctx.local_step == 3:
        raise ValueError("injected failure in rank 0's train_step")
    return mse_step(model, batch)


def crashing_step(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    ctx = step_context.current()
    if ctx.rank == 1 and ctx.local_step == 3:
        _mark_injection()
        os._exit(17)  # a hard crash: no Python cleanup, no message
    return mse_step(model, batch)


def hanging_step(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    ctx = step_context.current()
    if ctx.rank == 1 and ctx.local_step == 3:
        time.sleep(3600)
    return mse_step(model, batch)


def late_crashing_step(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    """Rank 1 dies at local step 3, after 2 s in it: its heartbeat has published its progress,
    so its peers see it behind the collective they wait in, as they would a stuck rank."""
    ctx = step_context.current()
    if ctx.rank == 1 and ctx.local_step == 3:
        time.sleep(2)
        os._exit(17)
    return mse_step(model, batch)


def late_and_hanging_step(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    """Rank 2 hangs at local step 3; rank 0 reaches that step's averaging 3 s after rank 1."""
    ctx = step_context.current()
    if ctx.local_step == 3 and ctx.rank == 2:
        time.sleep(3600)
    if ctx.local_step == 3 and ctx.rank == 0:
        time.sleep(3)
    return mse_step(model, batch)


def scalar_step(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    loss = mse_step(model, batch)
    step_context.record_scalar("rank", float(step_context.current().rank))
    return loss


def named_step(model: nn.Module, batch) -> torch.Tensor:
    """For datasets with named fields (a dict of tensors, a flodl dataset)."""
    return nn.functional.mse_loss(model(batch["x"]), batch["y"])


class SquaresBatches:
    """A ``get_batch`` dataset (fl.data.BatchDataset) of the regression task."""

    def __init__(self, n: int = 256) -> None:
        self.x, self.y = regression_data(n)

    def __len__(self) -> int:
        return self.x.shape[0]

    def get_batch(self, indices: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"x": self.x[indices], "y": self.y[indices]}


EPOCH_LOG = "FLODL_TEST_EPOCH_LOG"


def logging_epoch_fn(epoch: int, worker) -> None:
    """Appends ``rank epoch current_epoch intra-op-threads python-threads`` to the file named by
    $FLODL_TEST_EPOCH_LOG (the Python threads' names, comma-separated)."""
    names = ",".join(sorted(t.name for t in threading.enumerate()))
    with open(os.environ[EPOCH_LOG], "a") as f:
        f.write(f"{worker.rank} {epoch} {worker.current_epoch} {torch.get_num_threads()} {names}\n")


class RecordingMonitor:
    """Stands in for fl.Monitor: keeps every call (same ``log``/``finish`` signatures)."""

    def __init__(self) -> None:
        self.logs: list[tuple[int, float, dict]] = []
        self.finished = 0

    def log(self, epoch: int, elapsed: float, metrics: dict) -> None:
        assert self.finished == 0, "log after finish"
        self.logs.append((epoch, elapsed, metrics))

    def finish(self) -> None:
        self.finished += 1


SCHED_LOG = "FLODL_TEST_SCHED_LOG"


class DropSchedule:
    """LR 0.05, then 0.005 from step ``at``; appends ``rank step`` per query to $FLODL_TEST_SCHED_LOG."""

    def __init__(self, at: int) -> None:
        self.at = at

    def lr(self, step: int) -> float:
        with open(os.environ[SCHED_LOG], "a") as f:
            f.write(f"q {step_context.current().rank} {step}\n")
        return 0.05 if step < self.at else 0.005


def drop_at_6(world: int) -> DropSchedule:
    return DropSchedule(6)


def drop_at_32(world: int) -> DropSchedule:
    return DropSchedule(32)


def lr_logging_step(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    """Appends ``rank lr`` (the learning rate the optimizer trains this batch with)."""
    ctx = step_context.current()
    with open(os.environ[SCHED_LOG], "a") as f:
        f.write(f"lr {ctx.rank} {ctx.lr}\n")
    return mse_step(model, batch)


def read_schedule_log(path) -> dict[int, list[tuple[int, float]]]:
    """rank -> [(step the scheduler was queried at, LR the batch trained with)], in order."""
    steps: dict[int, list[int]] = {}
    lrs: dict[int, list[float]] = {}
    for line in Path(path).read_text().splitlines():
        if not line:
            continue
        kind, rank, value = line.split()
        if kind == "q":
            steps.setdefault(int(rank), []).append(int(value))
        else:
            lrs.setdefault(int(rank), []).append(float(value))
    return {r: list(zip(steps[r], lrs[r], strict=True)) for r in steps}


def freezing_rank0_step(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    """Rank 0 stops its own process (SIGSTOP): a process frozen whole, coordinator included."""
    ctx = step_context.current()
    if ctx.rank == 0 and ctx.local_step == 3:
        os.kill(os.getpid(), signal.SIGSTOP)
    return mse_step(model, batch)


def sleepy_step(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    """2 ms per batch: long enough that epochs arrive one by one."""
    time.sleep(0.002)
    return mse_step(model, batch)


COUNT_LOG = "FLODL_TEST_COUNT_LOG"


def counting_step(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    """Appends ``rank epoch`` per batch to $FLODL_TEST_COUNT_LOG."""
    ctx = step_context.current()
    with open(os.environ[COUNT_LOG], "a") as f:
        f.write(f"{ctx.rank} {ctx.epoch}\n")
    return mse_step(model, batch)


def batches_per_rank_and_epoch(path) -> dict[tuple[int, int], int]:
    counts: dict[tuple[int, int], int] = {}
    for line in Path(path).read_text().splitlines():
        rank, epoch = map(int, line.split())
        counts[rank, epoch] = counts.get((rank, epoch), 0) + 1
    return counts


class RebuiltNowhere:
    """A dataset that pickles fine but cannot be unpickled (as if its class were missing)."""

    def __init__(self) -> None:
        self.x, self.y = regression_data(64)

    def __len__(self) -> int:
        return self.x.shape[0]

    def get_batch(self, indices: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"x": self.x[indices], "y": self.y[indices]}

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        raise RuntimeError("RebuiltNowhere cannot be rebuilt in this process")


def make_grouped_sgd(params) -> torch.optim.Optimizer:
    """SGD on nn.Linear: the weight in group 0, the bias in group 1 at a tenth of the rate."""
    weight, bias = list(params)
    return torch.optim.SGD([{"params": [weight]}, {"params": [bias], "lr_scale": 0.1}], lr=1.0)


def half(step: int) -> float:
    return 0.5


def half_schedule(world: int):
    """A scheduler factory whose scheduler is a plain ``step -> lr`` function."""
    return half


GROUP_LOG = "FLODL_TEST_GROUP_LOG"


def logging_group_lrs(epoch: int, worker) -> None:
    """Appends ``rank epoch lr0 lr1`` (the rates the last step trained with) to $FLODL_TEST_GROUP_LOG."""
    lrs = " ".join(repr(float(g["lr"])) for g in worker.optimizer.param_groups)
    with open(os.environ[GROUP_LOG], "a") as f:
        f.write(f"{worker.rank} {epoch} {lrs}\n")


def freezing_rank1_step(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    """Rank 1 stops its own process (SIGSTOP) at its 4th batch; rank 0 stays healthy."""
    ctx = step_context.current()
    if ctx.rank == 1 and ctx.local_step == 3:
        _mark_injection()
        os.kill(os.getpid(), signal.SIGSTOP)
    return mse_step(model, batch)


SLOW_EXIT_S = 12.0  # past the heartbeat limit of a 10 s run timeout (5 s)


def rank0_failing_dataset() -> tuple[torch.Tensor, torch.Tensor]:
    """A dataset factory that raises in rank 0, whose process then takes long to exit.

    As on a saturated machine: the failing rank's heartbeat has stopped (it is exiting) well
    before its process is gone, and its peer dies of the failure too (its collective loses
    rank 0). The failure must still be blamed on rank 0's exception, not on a silent heartbeat
    or on the peer."""
    import atexit

    import torch.distributed as dist

    if dist.is_initialized() and dist.get_rank() == 0:
        atexit.register(time.sleep, SLOW_EXIT_S)
        raise ValueError("injected dataset failure on rank 0")
    return regression_data()


# Factories that go wrong on some rank only (they ask fl.train.current() where they run).


def rank_sized_data() -> tuple[torch.Tensor, torch.Tensor]:
    """64 samples on rank 0, 48 on the others."""
    return regression_data(64 if step_context.current().rank == 0 else 48)


def small_data() -> tuple[torch.Tensor, torch.Tensor]:
    """20 samples: fewer than one batch of 16 per rank on two ranks."""
    return regression_data(20)


def make_model_by_rank(device) -> nn.Module:
    """8 hidden units on rank 0, 12 on the others."""
    torch.manual_seed(0)
    hidden = 8 if step_context.current().rank == 0 else 12
    return nn.Sequential(nn.Linear(4, hidden), nn.Tanh(), nn.Linear(hidden, 1)).to(device)


def nan_step(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    """A NaN loss at local step 2 (a diverging run), then the loss as usual."""
    loss = mse_step(model, batch)
    return loss * float("nan") if step_context.current().local_step == 2 else loss
