"""One rank's Worker driven through an in-memory channel.

``MemoryChannel`` is a real (tiny) transport: what the worker sends lands in ``sent``, what a test
queues in ``inbox`` is what the worker receives. No part of the worker is replaced.
"""

from __future__ import annotations

import pickle
import queue

import pytest
import torch

from flodl.optim import set_lr
from flodl.train.averaging import average_snapshots, final_state
from flodl.train.errors import CollectiveError
from flodl.train.messages import (
    ApplyPolicy,
    BatchTiming,
    Checkpoint,
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
from flodl.train.worker import FINAL_ROUND, Worker
from tests.train import toy

X, Y = toy.regression_data(128)


class MemoryChannel:
    """The worker's side of a transport, in memory."""

    def __init__(self, *incoming) -> None:
        self.sent: list = []
        self.inbox: queue.Queue = queue.Queue()
        self.empty_waits = 0
        for msg in incoming:
            self.inbox.put(msg)

    def send(self, msg) -> None:
        self.sent.append(msg)

    def poll(self) -> list:
        out = []
        while not self.inbox.empty():
            out.append(self.inbox.get_nowait())
        return out

    def wait(self, timeout: float):
        try:
            return self.inbox.get(timeout=min(timeout, 0.05))
        except queue.Empty:
            self.empty_waits += 1
            if self.empty_waits > 20:  # nothing more will come: fail instead of hanging
                raise AssertionError("the worker waited on an empty channel") from None
            return None

    def of(self, kind) -> list:
        return [m for m in self.sent if isinstance(m, kind)]


class MeanOfOne:
    """A collective over a world of one: the average is the tensor itself."""

    def __init__(self) -> None:
        self.calls = 0
        self.weights: list[float] = []

    def average_(self, flat: torch.Tensor, weight: float) -> None:
        self.calls += 1
        self.weights.append(weight)


def make_worker(rank=0, world=2, channel=None, *, model=None, step=toy.mse_step, **kw) -> Worker:
    model = model or toy.make_model("cpu")
    return Worker(
        rank=rank,
        world=world,
        device=torch.device("cpu"),
        model=model,
        optimizer=kw.pop("optimizer", None) or toy.make_sgd(model.parameters()),
        train_step=step,
        dataset=kw.pop("dataset", (X, Y)),
        batch_size=kw.pop("batch_size", 16),
        seed=0,
        channel=channel,
        **kw,
    )


def batch(k: int = 0):
    return [X[k * 16 : (k + 1) * 16], Y[k * 16 : (k + 1) * 16]]


# -- items 39–45: state, snapshots, control ----------------------------------------------------


class SlicesOfAnArray:
    """get_batch hands out torch.from_numpy of a slice: torch cannot see it is the dataset."""

    def __init__(self):
        import numpy as np

        self.arr = np.ones((32, 1), dtype=np.float32)

    def __len__(self):
        return 32

    def get_batch(self, indices):
        start = int(indices.min())
        return torch.from_numpy(self.arr[start : start + len(indices)])


def test_a_train_step_changing_its_batch_in_place_leaves_the_dataset_alone():
    data = SlicesOfAnArray()
    w = make_worker(dataset=data, batch_size=4)
    fetched = w.fetch(torch.arange(4))
    fetched[0].mul_(0)  # e.g. x.sub_(mean) in a train step
    assert data.arr.sum() == 32


def test_a_fresh_worker():
    w = make_worker(rank=1)
    assert (w.rank, w.world, w.local_step, w.version, w.steps_since_avg) == (1, 2, 0, 0, 0)
    assert [p.data_ptr() for p in w.params()] == [p.data_ptr() for p in w.model.parameters()]
    assert w.dataset_size == 128


def test_a_batch_trains_counts_and_sends_nothing():
    ch = MemoryChannel()
    w = make_worker(channel=ch)
    before = [p.clone() for p in w.params()]
    loss, ms = w.train_batch(batch())
    assert loss > 0 and ms > 0
    assert (w.local_step, w.steps_since_avg) == (1, 1)
    assert any(not torch.equal(a, b) for a, b in zip(before, w.params(), strict=True))
    assert ch.sent == []  # timing is the plan loop's job


def test_request_params_sends_an_independent_cpu_snapshot_weighted_by_batches():
    ch = MemoryChannel()
    w = make_worker(channel=ch, model=toy.make_model_with_buffer("cpu"))
    for k in range(3):
        w.train_batch(batch(k))
    assert w.handle(RequestParams(7)) is None
    (snap,) = ch.of(Snapshot)
    assert (snap.rank, snap.round, snap.batch_count) == (0, 7, 3)
    assert [t.shape for t in snap.params] == [p.shape for p in w.params()]
    assert len(snap.buffers) == 3 and all(t.device.type == "cpu" for t in snap.params)
    kept = [t.clone() for t in snap.params]
    w.train_batch(batch(3))  # training on must not change what was sent
    assert all(torch.equal(a, b) for a, b in zip(kept, snap.params, strict=True))
    again = pickle.loads(pickle.dumps(snap))  # it can cross a process boundary
    assert all(torch.equal(a, b) for a, b in zip(again.params, snap.params, strict=True))
    fresh = make_worker(channel=MemoryChannel())
    fresh.handle(RequestParams(1))
    assert fresh.channel.sent[0].batch_count == 1  # never weight 0


def test_update_loads_params_and_buffers_and_sets_the_version():
    w = make_worker(model=toy.make_model_with_buffer("cpu"))
    params = [torch.full_like(p, 0.5) for p in w.params()]
    buffers = [b.clone() + 1 for b in w.buffers()]
    w.train_batch(batch())
    assert w.handle(Update(4, params, buffers)) is None
    assert w.version == 4 and w.steps_since_avg == 0
    assert all(torch.equal(a, b) for a, b in zip(w.params(), params, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(w.buffers(), buffers, strict=True))
    with pytest.raises(ValueError, match="averaged state has 1 params"):
        w.handle(Update(5, params[:1], buffers))


def test_control_messages():
    ch = MemoryChannel()
    w = make_worker(channel=ch, collective=MeanOfOne())
    plan = EpochPlan(0, 0, 64)
    assert w.handle(StartEpoch(plan)) is None and list(w.plans) == [plan]
    assert w.handle(SetGlobalStep(42)) is None and w.global_step == 42
    assert w.ctx.global_step == 42
    assert w.handle(Shutdown()) == "shutdown"
    w.train_batch(batch())
    assert w.handle(SyncNow(3)) is None
    (ack,) = ch.of(SyncAck)
    assert (ack.rank, ack.version, ack.step_count) == (0, 3, 1)
    assert w.version == 3 and w.steps_since_avg == 0 and w.collective.calls == 1
    assert ack.divergence is None  # Sync does not measure divergence


def test_collective_averaging_reports_divergence_outside_sync():
    ch = MemoryChannel()
    w = make_worker(channel=ch, collective=MeanOfOne(), policy=ApplyPolicy.CADENCE)
    w.handle(SyncNow(1))
    assert ch.of(SyncAck)[0].divergence == 0.0  # averaging with itself moves nothing


def test_collective_average_is_weighted_by_batches_since_the_last_one():
    collective = MeanOfOne()
    w = make_worker(channel=MemoryChannel(), collective=collective)
    w.handle(SyncNow(1))  # nothing trained yet: weight 1, never 0
    for i in range(3):
        w.train_batch(batch(i))
    w.handle(SyncNow(2))
    assert collective.weights == [1.0, 3.0]
    assert w.steps_since_avg == 0


def test_round_trip_train_snapshot_update_train():
    ch = MemoryChannel()
    w = make_worker(channel=ch)
    w.train_batch(batch(0))
    w.handle(RequestParams(1))
    snap = ch.of(Snapshot)[0]
    params, buffers = average_snapshots([snap.params], [snap.buffers], [snap.batch_count])
    w.handle(Update(1, params, buffers))
    loss, _ = w.train_batch(batch(1))
    assert loss > 0 and w.local_step == 2 and w.steps_since_avg == 1


def test_throttle_blocks_until_the_next_averaging_and_handles_what_comes_meanwhile():
    plan = EpochPlan(1, 0, 32)
    released = MemoryChannel(SetGlobalStep(9), StartEpoch(plan), Throttle(), SyncNow(2))
    w = make_worker(channel=released, collective=MeanOfOne())
    assert w.handle(Throttle()) is None
    assert w.global_step == 9 and list(w.plans) == [plan] and w.version == 2
    updated = MemoryChannel(Update(3, [p.clone() for p in w.params()], []))
    w.channel = updated
    assert w.handle(Throttle()) is None and w.version == 3
    w.channel = MemoryChannel(Checkpoint(1), Shutdown())
    assert w.handle(Throttle()) == "shutdown"


# -- items 47–49: plans ------------------------------------------------------------------------


def test_a_plan_sends_one_timing_per_batch_and_returns_its_metrics():
    ch = MemoryChannel()
    w = make_worker(channel=ch)
    metrics = w.run_plan(EpochPlan(0, 16, 40))  # 40 samples: 2 full batches, 8 dropped
    timings = ch.of(BatchTiming)
    assert [(t.rank, t.step_count) for t in timings] == [(0, 1), (0, 2)]
    assert all(t.batch_ms > 0 and t.loss > 0 for t in timings)
    assert isinstance(metrics, MetricsMsg)
    assert (metrics.epoch, metrics.batches, metrics.samples) == (0, 2, 40)
    assert metrics.avg_loss == pytest.approx(sum(t.loss for t in timings) / 2)


def test_a_plan_trains_on_its_slice_of_the_epoch_order():
    seen: list[torch.Tensor] = []

    def recording_step(model, b):
        seen.append(b[0])
        return toy.mse_step(model, b)

    w = make_worker(step=recording_step, batch_size=8)
    w.run_plan(EpochPlan(0, 0, 16))
    first = torch.cat(seen)
    seen.clear()
    w.run_plan(EpochPlan(0, 16, 16))
    second = torch.cat(seen)
    seen.clear()
    w.run_plan(EpochPlan(1, 0, 16))
    other_epoch = torch.cat(seen)
    rows = {tuple(r.tolist()) for r in torch.cat([first, second])}
    assert len(rows) == 32  # consecutive slices never overlap
    assert not torch.equal(first, other_epoch)  # the order changes per epoch


def test_a_shutdown_mid_plan_ends_it_early():
    ch = MemoryChannel(Shutdown())
    w = make_worker(channel=ch)
    assert w.run_plan(EpochPlan(0, 0, 128)) is None
    assert w.local_step == 1 and len(ch.of(BatchTiming)) == 1


def test_sequential_plans_report_their_epochs():
    w = make_worker(channel=MemoryChannel())
    got = [w.run_plan(EpochPlan(e, 0, 64)).epoch for e in range(3)]
    assert got == [0, 1, 2]


def test_run_trains_every_plan_then_sends_the_final_snapshot_and_exits():
    class Coordinating(MemoryChannel):
        """Hands out the next plan for every finished one, then shuts the rank down."""

        def send(self, msg) -> None:
            super().send(msg)
            if isinstance(msg, MetricsMsg):
                done = len(self.of(MetricsMsg))
                self.inbox.put(StartEpoch(EpochPlan(done, 0, 64)) if done < 2 else Shutdown())

    ch = Coordinating(StartEpoch(EpochPlan(0, 0, 64)))
    w = make_worker(channel=ch)
    w.run()
    assert [m.epoch for m in ch.of(MetricsMsg)] == [0, 1]
    assert ch.of(Snapshot)[-1].round == FINAL_ROUND
    assert ch.sent[-1] == Exiting(0)


def test_a_failing_step_reports_rank_step_and_traceback_then_raises():
    def step(model, b):
        if model.training and torch.rand(()) < 2:  # always
            raise ValueError("boom")

    ch = MemoryChannel(StartEpoch(EpochPlan(0, 0, 64)))
    w = make_worker(rank=1, channel=ch, step=step)
    with pytest.raises(ValueError, match="boom"):
        w.run()
    (exiting,) = ch.of(Exiting)
    assert exiting.rank == 1
    assert "rank 1 failed at local step 0 (epoch 0)" in exiting.error
    assert "ValueError: boom" in exiting.error


# -- item 50: two workers, CPU averaging by hand -----------------------------------------------


def test_two_workers_averaged_by_hand_end_identical():
    chans = [MemoryChannel(), MemoryChannel()]
    workers = [make_worker(r, channel=chans[r]) for r in range(2)]
    workers[0].run_plan(EpochPlan(0, 0, 64))
    workers[1].run_plan(EpochPlan(0, 64, 32))
    for w in workers:
        w.handle(RequestParams(1))
    snaps = [c.of(Snapshot)[0] for c in chans]
    assert [s.batch_count for s in snaps] == [4, 2]
    params, buffers = average_snapshots(
        [s.params for s in snaps], [s.buffers for s in snaps], [s.batch_count for s in snaps]
    )
    expected = [(2 * a + b) / 3 for a, b in zip(snaps[0].params, snaps[1].params, strict=True)]
    assert all(torch.allclose(p, e) for p, e in zip(params, expected, strict=True))
    for w in workers:
        w.handle(Update(1, params, buffers))
    for a, b in zip(workers[0].params(), workers[1].params(), strict=True):
        assert torch.equal(a, b)


# -- item 53: checkpoints ------------------------------------------------------------------------


def test_checkpoint_calls_the_function_on_rank_0_and_survives_its_failure(caplog):
    calls = []
    w0 = make_worker(0, checkpoint_fn=lambda v, m: calls.append((v, m)))
    assert w0.handle(Checkpoint(3)) is None
    assert calls == [(3, w0.model)]
    w1 = make_worker(1, checkpoint_fn=lambda v, m: calls.append((v, m)))
    w1.handle(Checkpoint(4))
    assert len(calls) == 1  # only rank 0 writes checkpoints

    def broken(version, model):
        raise OSError("disk full")

    failing = make_worker(0, checkpoint_fn=broken)
    assert failing.handle(Checkpoint(5)) is None  # training goes on
    failure = [r for r in caplog.records if r.name == "flodl.train" and r.exc_info]
    assert "checkpoint 5 failed" in failure[0].getMessage()
    assert "disk full" in str(failure[0].exc_info[1])


# -- items 34–38: LR schedules ------------------------------------------------------------------


class MultiStep:
    """A step schedule: ``base · gamma^(milestones passed)``."""

    def __init__(self, base: float, milestones: list[int], gamma: float = 0.1) -> None:
        self.base, self.milestones, self.gamma = base, milestones, gamma

    def lr(self, step: int) -> float:
        return self.base * self.gamma ** sum(step >= m for m in self.milestones)


@pytest.mark.parametrize("scale", [1.0, 2.5])
def test_worker_and_manual_loop_follow_the_same_lr_and_weights(scale):
    schedule = MultiStep(0.05, [4, 8])
    manual_model = toy.make_model("cpu")
    manual_opt = toy.make_sgd(manual_model.parameters())
    manual = []
    for step in range(12):
        for group in manual_opt.param_groups:
            group["lr"] = schedule.lr(step) * scale
        manual.append(manual_opt.param_groups[0]["lr"])
        toy.mse_step(manual_model, batch(step % 8)).backward()
        manual_opt.step()
        manual_opt.zero_grad()

    w = make_worker(world=1, scheduler=schedule, lr_scale=scale)
    driven = []
    for step in range(12):
        w.train_batch(batch(step % 8))
        driven.append(w.optimizer.param_groups[0]["lr"])
    assert driven == manual
    assert len(set(driven)) == 3  # exactly two drops, at steps 4 and 8
    assert driven[0] == pytest.approx(0.05 * scale) and driven[4] == pytest.approx(0.005 * scale)
    for a, b in zip(w.params(), manual_model.parameters(), strict=True):
        assert torch.equal(a, b.detach())


def test_the_schedule_is_queried_at_global_step_plus_local_progress():
    queried: list[int] = []

    def schedule(step: int) -> float:  # a plain callable works too
        queried.append(step)
        return 0.01

    w = make_worker(scheduler=schedule, collective=MeanOfOne(), channel=MemoryChannel())
    for k in range(3):
        w.train_batch(batch(k))
    w.handle(SyncNow(1))
    w.handle(SetGlobalStep(10))  # both ranks' batches, added up by the coordinator
    w.train_batch(batch(3))
    assert queried == [0, 1, 2, 10]


def test_lr_scale_without_a_scheduler_scales_the_optimizer_once():
    w = make_worker(lr_scale=2.0)
    assert w.optimizer.param_groups[0]["lr"] == pytest.approx(0.10)
    w.train_batch(batch())
    assert w.optimizer.param_groups[0]["lr"] == pytest.approx(0.10)


# -- item 79: the final state ------------------------------------------------------------------


def snap(rank: int, value: float, count: int = 1) -> Snapshot:
    return Snapshot(rank, FINAL_ROUND, [torch.tensor([value])], [torch.tensor([value * 10])], count)


def test_final_state_averages_the_final_snapshots():
    state = final_state({0: snap(0, 2.0), 1: snap(1, 4.0)})
    assert state.params[0].item() == 3.0 and state.buffers[0].item() == 30.0
    weighted = final_state({0: snap(0, 2.0, count=3), 1: snap(1, 4.0, count=1)})
    assert weighted.params[0].item() == 2.5  # params batch-weighted
    assert weighted.buffers[0].item() == 30.0  # buffers equally


def test_final_state_of_a_lone_survivor_is_its_state_verbatim_and_none_without_any():
    lone = final_state({1: snap(1, 1.2345678)})
    assert torch.equal(lone.params[0], torch.tensor([1.2345678]))
    assert final_state({}) is None


# -- item 91 (the in-process part): epoch_fn ------------------------------------------------------


def test_epoch_fn_runs_once_per_epoch_before_its_first_batch_and_may_set_the_lr():
    calls = []

    def epoch_fn(epoch, worker):
        calls.append((epoch, worker.current_epoch, worker.local_step))
        set_lr(worker.optimizer, 0.01 * (epoch + 1))

    w = make_worker(epoch_fn=epoch_fn)
    w.run_plan(EpochPlan(0, 0, 32))
    w.run_plan(EpochPlan(0, 32, 32))  # a second chunk of the same epoch: no new call
    assert w.optimizer.param_groups[0]["lr"] == pytest.approx(0.01)
    w.run_plan(EpochPlan(1, 0, 32))
    assert calls == [(0, 0, 0), (1, 1, 4)]
    assert w.optimizer.param_groups[0]["lr"] == pytest.approx(0.02)


def test_the_schedule_step_never_goes_back_when_an_averaging_lands_between_batches():
    queried: list[int] = []

    def schedule(step: int) -> float:
        queried.append(step)
        return 0.01

    w = make_worker(scheduler=schedule, collective=MeanOfOne(), channel=MemoryChannel())
    for k in range(3):
        w.train_batch(batch(k))
    w.handle(SyncNow(1))  # resets steps_since_avg; the coordinator's count comes later
    w.train_batch(batch(3))
    # The coordinator counted 2 of this rank's batches (the third was still on its way) and
    # 4 of the other rank's: 6 global, of which this rank's counter was at 2.
    w.handle(SetGlobalStep(6, (2, 4)))
    w.train_batch(batch(4))
    assert queried == [0, 1, 2, 3, 8]
    assert w.schedule_step == 9


def test_max_batches_caps_an_epoch_however_many_chunks_it_comes_in():
    w = make_worker(max_batches=2)
    sizes = [w.run_plan(EpochPlan(0, off, 48)).batches for off in (0, 48)]  # 3 batches each
    assert sizes == [2, 0] and w.local_step == 2
    assert w.run_plan(EpochPlan(1, 0, 48)).batches == 2  # a new epoch, a new allowance


class BrokenCollective:
    """The all-reduce fails, as when a peer's process dies mid-collective."""

    def average_(self, flat: torch.Tensor, weight: float) -> None:
        raise RuntimeError("Connection closed by peer")


def test_a_failed_collective_still_hands_in_the_intact_replica():
    channel = MemoryChannel(StartEpoch(EpochPlan(0, 0, 64)), SyncNow(1))
    w = make_worker(channel=channel, collective=BrokenCollective())
    with pytest.raises(CollectiveError, match=r"averaging version 1 failed .* a peer stopped"):
        w.run()
    finals = [m for m in channel.sent if isinstance(m, Snapshot) and m.round == FINAL_ROUND]
    assert len(finals) == 1  # counted in the survivors' average
    assert isinstance(channel.sent[-1], Exiting) and "Connection closed" in channel.sent[-1].error


def test_a_failing_train_step_hands_in_no_final_state():
    channel = MemoryChannel(StartEpoch(EpochPlan(0, 0, 64)))
    w = make_worker(rank=1, channel=channel, step=toy.failing_step)  # raises at local step 3
    with pytest.raises(ValueError, match="injected failure"):
        w.run()
    assert not [m for m in channel.sent if isinstance(m, Snapshot)]
    assert isinstance(channel.sent[-1], Exiting) and "local step 3" in channel.sent[-1].error
