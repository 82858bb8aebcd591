"""The coordinator state machine driven with in-memory messages."""

from __future__ import annotations

import itertools

import pytest
import torch

from flodl.train.coordinator import Coordinator, CoordinatorConfig
from flodl.train.el_che import ElChe
from flodl.train.errors import TrainerConfigError
from flodl.train.messages import (
    ApplyPolicy,
    AverageBackend,
    BatchTiming,
    Checkpoint,
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

SYNC, CADENCE, ASYNC = ApplyPolicy.SYNC, ApplyPolicy.CADENCE, ApplyPolicy.ASYNC
NCCL, CPU = AverageBackend.NCCL, AverageBackend.CPU


def make(policy=CADENCE, backend=NCCL, world=2, n=1000, bs=10, epochs=3, **kw) -> Coordinator:
    cfg = CoordinatorConfig(
        world=world,
        num_epochs=epochs,
        dataset_size=n,
        batch_size=bs,
        policy=policy,
        backend=backend,
        **kw,
    )
    return Coordinator(cfg, ElChe(world, 10, overhead_target=0.5) if world > 1 else None)


def batches(c: Coordinator, rank: int, k: int, ms: float = 10.0) -> None:
    for _ in range(k):
        c.last_step_count[rank] += 1
        c.on_timing(BatchTiming(rank, ms, c.last_step_count[rank], loss=1.0))


def of(out, kind):
    return [(r, m) for r, m in out if isinstance(m, kind)]


def test_initial_state():
    c = make()
    assert c.version == 0 and c.global_step == 0
    assert not c.el_che.calibrated
    assert c.steps_since_avg == [0, 0]


def test_sync_triggers_once_every_rank_has_a_batch():
    c = make(SYNC)
    batches(c, 0, 3)
    assert not c.should_average()
    batches(c, 1, 1)
    assert c.should_average()


def test_async_uses_batch_counts_even_after_calibration():
    c = make(ASYNC)
    batches(c, 0, 10)
    batches(c, 1, 9)
    assert not c.should_average()
    batches(c, 1, 1)
    assert c.should_average()
    c.tick(0.0)
    for r in range(2):
        c.on_sync_ack(SyncAck(r, c.version, c.last_step_count[r] + 1))
    assert c.el_che.calibrated
    batches(c, 0, 1, ms=1e6)  # a huge wall time must not trigger Async
    batches(c, 1, 1, ms=1e6)
    assert not c.should_average()


def test_cadence_switches_from_counts_to_wall_time_after_calibration():
    c = make(CADENCE)
    batches(c, 0, 10, ms=5.0)
    batches(c, 1, 10, ms=10.0)
    assert c.should_average()
    out = c.tick(0.0)
    assert len(of(out, SyncNow)) == 2
    for r in range(2):
        c.on_sync_ack(SyncAck(r, c.version, c.last_step_count[r] + 1))
    assert c.el_che.batch_counts == [20, 10]
    assert c.el_che.anchor_wall_ms() == pytest.approx(100.0)
    batches(c, 0, 1, ms=100.0)
    batches(c, 1, 1, ms=100.0)  # 1 batch each, but a full anchor's worth of wall time
    assert c.should_average()


def test_collective_trigger_sends_syncnow_bumps_version_and_zeroes_counters():
    c = make(SYNC)
    batches(c, 0, 2)
    batches(c, 1, 3)
    out = c.tick(0.0)
    assert [r for r, _ in of(out, SyncNow)] == [0, 1]
    assert c.version == 1
    assert c.global_step == 5
    assert of(out, SetGlobalStep) == [(0, SetGlobalStep(5, (2, 3))), (1, SetGlobalStep(5, (2, 3)))]
    assert c.steps_since_avg == [0, 0]
    assert c.wall_ms_accum == [0.0, 0.0]


def test_no_second_collective_before_every_ack():
    c = make(SYNC)
    batches(c, 0, 1)
    batches(c, 1, 1)
    c.tick(0.0)
    batches(c, 0, 1)
    batches(c, 1, 1)
    assert not c.should_average()
    c.on_sync_ack(SyncAck(0, 1, 2))
    assert not c.should_average()
    c.on_sync_ack(SyncAck(1, 0, 2))  # an ack for an old version does not count
    assert not c.should_average()
    c.on_sync_ack(SyncAck(1, 1, 2))
    assert c.should_average()


def test_acks_are_not_counted_as_batches():
    c = make(SYNC)
    batches(c, 0, 1)
    batches(c, 1, 1)
    c.tick(0.0)
    for r in range(2):
        c.on_sync_ack(SyncAck(r, 1, 5, divergence=0.01))
    assert c.steps_since_avg == [0, 0]
    assert c.wall_ms_accum == [0.0, 0.0]
    assert c.last_step_count == [5, 5]
    assert c.divergences == [0.01, 0.01]


def test_no_averaging_with_an_exited_rank_after_the_end_or_during_cpu_averaging():
    c = make(SYNC)
    batches(c, 0, 5)
    batches(c, 1, 5)
    c.on_exiting(Exiting(1))
    c.on_exiting(Exiting(1))  # saturating
    assert c.active_count == 1
    assert not c.should_average()
    done = make(SYNC)
    batches(done, 0, 5)
    batches(done, 1, 5)
    done.all_done = True
    assert not done.should_average()
    cpu = make(SYNC, CPU)
    batches(cpu, 0, 1)
    batches(cpu, 1, 1)
    cpu.tick(0.0)
    batches(cpu, 0, 1)
    batches(cpu, 1, 1)
    assert cpu.cpu_round is not None and not cpu.should_average()


def snapshot(rank, rnd, value, count):
    return Snapshot(
        rank, rnd, [torch.full((2,), float(value))], [torch.full((1,), float(value))], count
    )


def test_cpu_round_requests_throttles_under_sync_and_delivers_the_weighted_average():
    c = make(SYNC, CPU)
    batches(c, 0, 1)
    batches(c, 1, 3)
    out = c.tick(0.0)
    assert len(of(out, RequestParams)) == 2
    assert len(of(out, Throttle)) == 2  # lockstep under Sync
    rnd = c.cpu_round.round
    c.on_snapshot(snapshot(0, rnd, 1.0, 1))
    assert c.tick(0.1) == []  # still collecting
    c.on_snapshot(snapshot(1, rnd, 5.0, 3))
    out = c.tick(0.2)
    updates = of(out, Update)
    assert len(updates) == 2
    assert torch.equal(updates[0][1].params[0], torch.full((2,), 4.0))  # (1*1 + 5*3) / 4
    assert torch.equal(updates[0][1].buffers[0], torch.full((1,), 3.0))  # equal weights
    assert c.version == 1 and c.cpu_round is None


def test_cpu_round_without_throttle_under_cadence():
    c = make(CADENCE, CPU)
    batches(c, 0, 10)
    batches(c, 1, 10)
    assert of(c.tick(0.0), Throttle) == []


def test_cpu_round_soft_aborts_and_stale_snapshots_do_not_leak():
    c = make(SYNC, CPU, snapshot_timeout=5.0)
    batches(c, 0, 1)
    batches(c, 1, 1)
    c.tick(0.0)
    stale_round = c.cpu_round.round
    c.on_snapshot(snapshot(0, stale_round, 100.0, 1))
    retry = c.tick(6.0)  # deadline passed: soft abort, then a fresh round on the same tick
    assert c.abort_count == 1 and c.version == 0
    assert of(retry, RequestParams) == [(0, RequestParams(2)), (1, RequestParams(2))]
    c.on_snapshot(snapshot(0, stale_round, 100.0, 1))  # a late one from the aborted round
    c.on_snapshot(snapshot(0, c.cpu_round.round, 1.0, 1))
    c.on_snapshot(snapshot(1, c.cpu_round.round, 3.0, 1))
    update = of(c.tick(7.5), Update)[0][1]
    assert torch.equal(update.params[0], torch.full((2,), 2.0))


def test_cpu_finish_subtracts_the_trigger_time_snapshot():
    c = make(CADENCE, CPU)
    batches(c, 0, 10)
    batches(c, 1, 10)
    c.tick(0.0)
    rnd = c.cpu_round.round
    batches(c, 0, 2)  # trained while the round was collecting
    batches(c, 1, 1)
    c.on_snapshot(snapshot(0, rnd, 1.0, 10))
    c.on_snapshot(snapshot(1, rnd, 1.0, 10))
    c.tick(0.1)
    assert c.steps_since_avg == [2, 1]
    assert c.global_step == 20


@pytest.mark.parametrize("backend", [NCCL, CPU])
def test_each_rank_s_first_batch_is_a_warm_up_el_che_does_not_time(backend):
    # Rank 1's first batch carries its device's start (2 s); the others take 10 ms on both
    # ranks. Timed, El Che took rank 1 for 20x slower (counts [200, 10]) and Cadence's next
    # window for 2 s of compute; untimed, the ranks are equal and the window is 10 batches.
    c = make(CADENCE, backend)
    batches(c, 0, 10)
    batches(c, 1, 1, ms=2000.0)
    batches(c, 1, 9)
    c.tick(0.0)
    if backend is CPU:
        rnd = c.cpu_round.round
        c.on_snapshot(snapshot(0, rnd, 1.0, 10))
        c.on_snapshot(snapshot(1, rnd, 1.0, 10))
        c.tick(0.0)  # an instant round: no sync cost to tune the anchor by
    assert c.version == 1 and c.global_step == 20  # the warm-up batch is trained and counted
    assert c.el_che.calibrated and c.el_che.ms_per_batch == [10.0, 10.0]
    assert c.el_che.batch_counts == [10, 10]
    assert c.el_che.anchor_wall_ms() == 100.0
    batches(c, 1, 1, ms=2000.0)  # a slow batch later on is a slow batch: timed
    assert c.wall_ms_accum[1] == 2000.0 and c.timed_steps[1] == 1


@pytest.mark.parametrize("backend", [NCCL, CPU])
def test_throttle_only_with_cpu_backend_and_a_limit(backend):
    c = make(CADENCE, backend, max_batch_diff=0)
    batches(c, 0, 2)
    batches(c, 1, 1)
    out = c.tick(0.0)
    assert of(out, Throttle) == ([(0, Throttle())] if backend is CPU else [])
    assert of(c.tick(0.0), Throttle) == []  # never twice
    assert of(make(CADENCE, CPU).tick(0.0), Throttle) == []  # unset: never


def test_heterogeneous_timing_calibrates_el_che_and_partitions():
    c = make(CADENCE, CPU, progressive=False)
    batches(c, 0, 10, ms=5.0)
    batches(c, 1, 10, ms=10.0)
    c.tick(0.0)
    rnd = c.cpu_round.round
    c.on_snapshot(snapshot(0, rnd, 1.0, 10))
    c.on_snapshot(snapshot(1, rnd, 1.0, 10))
    c.tick(0.01)
    assert c.el_che.batch_counts[0] >= c.el_che.batch_counts[1]
    sizes = [p.size for p in c._plans_for(5)]
    assert sizes[0] > sizes[1] and sum(sizes) == 1000


def test_partition_plans():
    assert [p.size for p in make(SYNC, world=3, n=100, bs=1)._plans_for(0)] == [34, 33, 33]
    ratios = make(SYNC, world=3, n=900, bs=1, partition_ratios=[3, 2, 1])
    assert [p.size for p in ratios._plans_for(0)] == [450, 300, 150]
    with pytest.raises(TrainerConfigError, match="2 entries for 3 ranks"):
        make(SYNC, world=3, partition_ratios=[1, 1])
    with pytest.raises(TrainerConfigError, match="non-progressive"):
        make(CADENCE, partition_ratios=[1, 1])


def test_config_validation():
    with pytest.raises(TrainerConfigError, match="fewer than one batch"):
        make(n=5, bs=10)
    with pytest.raises(TrainerConfigError, match="num_epochs"):
        make(epochs=0)


def finish(c, rank, plan, now=0.0, loss=1.0):
    return c.on_metrics(
        MetricsMsg(rank, plan.epoch, loss, plan.size // c.cfg.batch_size, 1.0, plan.size), now
    )


def plans_of(out):
    return {r: m.plan for r, m in of(out, StartEpoch)}


def test_sync_non_progressive_epochs_and_shutdown():
    c = make(SYNC, epochs=2)
    first = plans_of(c.start(0.0))
    assert set(first) == {0, 1} and all(p.epoch == 0 for p in first.values())
    assert finish(c, 0, first[0]) == []  # Sync ignores per-rank completion
    second = plans_of(finish(c, 1, first[1]))
    assert {p.epoch for p in second.values()} == {1}
    assert [m.epoch for m in c.take_epochs()] == [0]
    finish(c, 0, second[0])
    out = finish(c, 1, second[1])
    assert of(out, Shutdown) == [(0, Shutdown()), (1, Shutdown())]
    assert c.all_done


def test_async_non_progressive_lookahead():
    c = make(ASYNC, progressive=False, epochs=4)
    first = plans_of(c.start(0.0))
    ahead = plans_of(finish(c, 0, first[0]))
    assert ahead[0].epoch == 1  # finishing epoch 0 dispatches epoch 1
    assert finish(c, 0, ahead[0]) == []  # epoch 2 is too far ahead: rank 0 waits
    released = plans_of(finish(c, 1, first[1]))  # epoch 0 aggregates
    assert released == {0: c._plans_for(2)[0], 1: c._plans_for(1)[1]}


def test_all_epochs_done_flips_on_the_last_epoch():
    c = make(SYNC, epochs=1)
    plans = plans_of(c.start(0.0))
    finish(c, 0, plans[0])
    assert not c.all_done
    finish(c, 1, plans[1])
    assert c.all_done


def test_checkpoint_every_two_epochs_goes_to_rank_zero():
    c = make(SYNC, epochs=3, checkpoint_every=2)
    checkpoints = []
    plans = plans_of(c.start(0.0))
    for _ in range(3):
        out = []
        for r in (0, 1):
            out += finish(c, r, plans[r])
        checkpoints += of(out, Checkpoint)
        plans = plans_of(out) or plans
    assert checkpoints == [(0, Checkpoint(2))]


def test_progressive_chunks_cover_the_epoch_without_overlap():
    c = make(CADENCE, epochs=1, n=400, bs=10)
    out = c.start(0.0)
    seen = []
    pending = plans_of(out)
    while pending:
        rank, plan = next(iter(pending.items()))
        del pending[rank]
        seen.append((plan.offset, plan.size))
        pending.update(plans_of(finish(c, rank, plan)))
    seen.sort()
    assert seen[0][0] == 0
    assert all(a + s == b for (a, s), (b, _) in itertools.pairwise(seen))
    assert sum(s for _, s in seen) == 400
    assert c.all_done


def test_progressive_epoch_aggregates_only_after_every_rank_finished():
    c = make(CADENCE, epochs=3, n=80, bs=10)  # 8 batches: probe chunks of 4
    first = plans_of(c.start(0.0))
    assert first[0].size == 40 and first[1].size == 40
    streamed = plans_of(finish(c, 0, first[0]))  # rank 0 streams into epoch 1
    assert streamed[0].epoch == 1
    assert c.take_epochs() == []
    assert 1 in c.pools
    finish(c, 1, first[1], loss=3.0)
    (m,) = c.take_epochs()
    assert m.epoch == 0 and m.avg_loss == pytest.approx(2.0)
    assert 1 in c.pools  # epoch 1's pool survives


@pytest.mark.parametrize("backend", [NCCL, CPU])
def test_overshoot_gate_blocks_cross_epoch_dispatch_on_both_backends(backend):
    c = make(CADENCE, backend, epochs=3, n=80, bs=10, max_overshoot=2)
    first = plans_of(c.start(0.0))
    batches(c, 0, 11)  # below count (10) + overshoot (2): may stream into epoch 1
    batches(c, 1, 1)
    assert plans_of(finish(c, 0, first[0])) != {}
    c = make(CADENCE, backend, epochs=3, n=80, bs=10, max_overshoot=2)
    first = plans_of(c.start(0.0))
    batches(c, 0, 12)  # >= count (10) + overshoot (2): waits for the next averaging
    batches(c, 1, 1)
    assert plans_of(finish(c, 0, first[0])) == {}
    assert not c.should_average()  # rank 1 still holds work: its window is not over
    out = finish(c, 1, first[1])  # epoch 0 is complete: epoch 1 is current, nobody is ahead
    assert set(plans_of(out)) == {0, 1}


def test_when_no_rank_holds_work_the_coordinator_averages_at_once():
    # A safety net: the gate alone cannot idle every rank (someone holds the current epoch's
    # work), but a rank whose work vanished must never leave the others gated forever.
    c = make(CADENCE, NCCL, epochs=3, n=80, bs=10, max_overshoot=2)
    first = plans_of(c.start(0.0))
    batches(c, 0, 30)  # far past its count: gated at the epoch boundary
    batches(c, 1, 1)  # the Cadence trigger (every rank at its count) is nowhere near
    assert plans_of(finish(c, 0, first[0])) == {}
    assert not c.should_average()
    c._owed[1] = 0  # rank 1 holds nothing either
    assert c.should_average()
    out = c.tick(0.0)
    assert of(out, SyncNow) and set(plans_of(out)) == {0}  # and the gate is released


def test_final_epoch_under_streaming_shuts_everyone_down():
    c = make(CADENCE, epochs=1, n=80, bs=10)
    first = plans_of(c.start(0.0))
    finish(c, 0, first[0])
    out = finish(c, 1, first[1])
    assert of(out, Shutdown) == [(0, Shutdown()), (1, Shutdown())]


def test_async_overshoot_auto_grows_to_its_cap_and_user_value_is_fixed():
    c = make(ASYNC, CPU)
    start = c.max_overshoot
    assert start >= 2
    for _ in range(20):
        c._finish([1, 1], [1.0, 1.0], [1, 1], 0.0, [0.0, 0.0], [1, 1])
    assert start < c.max_overshoot <= 15
    fixed = make(ASYNC, CPU, max_overshoot=3)
    fixed._finish([1, 1], [1.0, 1.0], [1, 1], 0.0, [0.0, 0.0], [1, 1])
    assert fixed.max_overshoot == 3


def test_rising_divergence_never_shrinks_the_anchor():
    c = make(CADENCE)
    anchor = c.el_che.anchor
    for d in (0.1, 0.2, 0.3, 0.4):
        c._finish([10, 10], [100.0, 100.0], [10, 10], 0.0, [d, d], [10, 10])
    assert c.el_che.anchor >= anchor


def test_collective_sync_cost_feeds_el_che():
    # Parity decision 3: the measured collective time reaches El Che, so the anchor auto-tunes.
    c = Coordinator(
        CoordinatorConfig(world=2, num_epochs=1, dataset_size=100, batch_size=1, policy=SYNC),
        ElChe(2, 10, overhead_target=0.1),
    )
    batches(c, 0, 1, ms=100.0)
    batches(c, 1, 1, ms=100.0)
    c.tick(0.0)
    c.on_sync_ack(SyncAck(0, 1, 2, sync_ms=50.0))
    c.on_sync_ack(SyncAck(1, 1, 2, sync_ms=900.0))  # rank 1 also waited at the barrier
    batches(c, 0, 1, ms=100.0)
    batches(c, 1, 1, ms=100.0)
    c.tick(0.0)
    assert c.el_che.anchor == 50  # 50 % overhead against a 10 % target


def test_a_rank_owes_only_what_it_was_asked_for():
    """The no-progress watchdog blames a silent rank only if it owes something."""
    c = make(SYNC, epochs=2)
    first = plans_of(c.start(0.0))
    assert c.owes(0) and c.owes(1)  # both have a plan to finish
    finish(c, 0, first[0])
    assert not c.owes(0) and c.owes(1)  # rank 0 waits for rank 1: idle, not stuck
    batches(c, 1, 1)
    batches(c, 0, 1)
    assert of(c.tick(0.0), SyncNow)
    assert c.owes(0)  # an acknowledgement is owed again


def test_owing_under_progressive_dispatch_and_cpu_rounds():
    c = make(CADENCE, backend=CPU, epochs=1, n=80, bs=10)
    first = plans_of(c.start(0.0))
    finish(c, 0, first[0])  # the epoch is handed out: nothing more for rank 0
    assert not c.owes(0) and c.owes(1)
    finish(c, 1, first[1])
    assert not c.owes(1)

    c = make(SYNC, backend=CPU, progressive=True, epochs=1, n=80)
    first = plans_of(c.start(0.0))
    batches(c, 0, 4)
    finish(c, 0, first[0])
    batches(c, 1, 1)
    assert not c.owes(0)
    assert of(c.tick(0.0), RequestParams)
    assert c.owes(0)  # its snapshot for the round is owed
    c.on_snapshot(Snapshot(0, c.cpu_round.round, [torch.ones(1)], [], 4))
    assert not c.owes(0) and c.owes(1)


@pytest.mark.parametrize("policy", [SYNC, CADENCE, ASYNC])
def test_a_smoke_cap_makes_each_epoch_that_many_batches_per_rank(policy):
    c = make(policy, n=1000, bs=10, max_batches_per_rank=2)
    out = c.start(0.0)
    plans = [m.plan for _, m in of(out, StartEpoch)]
    assert [p.size for p in plans] == [20, 20]  # two batches each
    assert sum(p.size for p in plans) == c.cfg.dataset_size == 40  # the whole (smoke) epoch


def test_a_smoke_cap_is_each_ranks_quota_of_a_progressive_epoch():
    # Rank 0 is fast: without quotas it would take all of epoch 1 while rank 1 finishes epoch 0.
    c = make(CADENCE, n=1000, bs=10, epochs=2, max_batches_per_rank=2)
    first = plans_of(c.start(0.0))
    out = finish(c, 0, first[0])
    second = plans_of(out)[0]
    assert (second.epoch, second.size) == (1, 20)  # its quota of epoch 1
    assert plans_of(finish(c, 0, second)) == {}  # nothing more for rank 0
    out = finish(c, 1, first[1])
    assert plans_of(out)[1].epoch == 1 and plans_of(out)[1].size == 20  # rank 1's share is left
