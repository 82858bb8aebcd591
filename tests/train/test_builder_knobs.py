"""Every builder knob, set through the builder, with its effect observed — no processes spawned.

One-device knobs train in-process. Multi-rank knobs are observed on the coordinator the run would
build (``coordinator_for``, the very function rank 0 calls with the builder's spec), driven with
in-memory messages as in test_coordinator.py. The scheduler and ``lr_scale_ratio`` are covered
end to end in test_trainer.py (one device and two ranks).
"""

from __future__ import annotations

import pytest
import torch

import flodl as fl
from flodl.train.builder_runtime import coordinator_for
from flodl.train.guard import GuardAction
from flodl.train.messages import BatchTiming, StartEpoch, Throttle
from tests.train import toy

DATA = toy.regression_data()
CADENCE, ASYNC, SYNC = fl.ApplyPolicy.CADENCE, fl.ApplyPolicy.ASYNC, fl.ApplyPolicy.SYNC


def builder() -> fl.TrainerBuilder:
    return (
        fl.Trainer.builder(toy.make_model, toy.make_sgd, toy.mse_step)
        .dataset(DATA)
        .batch_size(16)
        .num_epochs(1)
    )


def coordinator(b: fl.TrainerBuilder, n: int = 1024):
    return coordinator_for(b.spec, 2, n)


def plan_sizes(out) -> list[int]:
    return [m.plan.size for _, m in sorted(out) if isinstance(m, StartEpoch)]


def moved(state: fl.TrainedState) -> float:
    start = [p.detach() for p in toy.make_model("cpu").parameters()]
    return float(
        torch.cat([(a - b).flatten() for a, b in zip(state.params, start, strict=True)]).norm()
    )


# -- one device, trained --------------------------------------------------------------------


def test_max_grad_norm_clips_every_step():
    clipped = builder().max_grad_norm(1e-3).run().join()
    free = builder().run().join()
    # 32 steps of SGD(lr=0.05) with gradients clipped to norm 1e-3 move at most 32 * 0.05 * 1e-3.
    assert moved(clipped) <= 32 * 0.05 * 1e-3 + 1e-7
    assert moved(free) > 1.0


def test_seed_sets_the_sample_order():
    a, b, c = (builder().seed(s).run().join() for s in (1, 1, 2))
    assert all(torch.equal(x, y) for x, y in zip(a.params, b.params, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(a.params, c.params, strict=True))


# -- several ranks: the coordinator the run would build ---------------------------------------


def test_anchor_is_every_rank_s_first_count():
    assert coordinator(builder().anchor(4)).el_che.batch_counts == [4, 4]


def test_speed_hint_seeds_el_che_and_sizes_the_first_chunks():
    c = coordinator(builder().policy(CADENCE).speed_hint(1, 3.0))
    assert c.el_che.batch_counts == [30, 10]
    # 64 batches: rank 0 takes ceil(64 * 30/40) = 48, rank 1 ceil(16 * 10/40) = 4 (the minimum).
    assert plan_sizes(c.start(0.0)) == [48 * 16, 4 * 16]


def test_partition_ratios_split_each_epoch_without_progressive_dispatch():
    c = coordinator(builder().policy(CADENCE).progressive_dispatch(False).partition_ratios([3, 1]))
    assert plan_sizes(c.start(0.0)) == [768, 256]


def test_progressive_dispatch_switches_between_chunks_and_whole_partitions():
    chunks = coordinator(builder().policy(SYNC).progressive_dispatch(True))
    assert plan_sizes(chunks.start(0.0)) == [64, 64]  # 4-batch probe chunks
    whole = coordinator(builder().policy(CADENCE).progressive_dispatch(False))
    assert plan_sizes(whole.start(0.0)) == [512, 512]


def test_max_batch_diff_throttles_a_rank_that_leads_and_clamps_count_changes():
    c = coordinator(builder().backend(fl.AverageBackend.CPU).max_batch_diff(0))
    assert c.el_che.max_batch_diff == 0
    c.on_timing(BatchTiming(0, 1.0, 1))
    assert c.tick(0.0) == [(0, Throttle())]  # lockstep: one batch ahead is too many


def test_max_overshoot_is_fixed_and_gates_cross_epoch_work():
    c = coordinator(builder().policy(ASYNC).max_overshoot(7), n=160)
    assert c.max_overshoot == 7
    assert not c._overshoot_auto  # a user value never auto-tunes
    assert not c._overshoot_blocked(0)
    c.steps_since_avg[0] = 10 + 7  # count 10 + overshoot 7
    assert c._overshoot_blocked(0)


@pytest.mark.parametrize(("target", "anchor"), [(0.10, 40), (0.50, 10)])
def test_overhead_target_decides_when_the_anchor_grows(target, anchor):
    c = coordinator(builder().overhead_target(target))
    c.el_che.report_timing([1000.0, 1000.0], [10, 10], sync_ms=400.0)  # 40 % overhead
    assert c.el_che.anchor == anchor


def test_max_anchor_caps_the_anchor():
    c = coordinator(builder().max_anchor(15))
    c.el_che.report_timing([1000.0, 1000.0], [10, 10], sync_ms=5000.0)
    assert c.el_che.anchor == 15


@pytest.mark.parametrize(
    ("knob", "action"),
    [
        (lambda b: b, GuardAction.SUPPRESS_GROWTH),  # default threshold 0.05
        (lambda b: b.divergence_threshold(0.5), GuardAction.STABLE),
        (lambda b: b.no_divergence_guard(), GuardAction.STABLE),
    ],
)
def test_divergence_threshold_and_no_divergence_guard(knob, action):
    guard = coordinator(knob(builder().policy(ASYNC))).guard
    actions = [guard.observe([d, d]) for d in (0.1, 0.2, 0.3)]  # rising, above 0.05
    assert actions[-1] is action


def test_snapshot_timeout_bounds_a_cpu_averaging_round():
    c = coordinator(builder().policy(SYNC).backend(fl.AverageBackend.CPU).snapshot_timeout(2.5))
    for r in (0, 1):
        c.on_timing(BatchTiming(r, 1.0, 1))
    c.tick(0.0)
    assert c.cpu_round is not None
    c.tick(2.4)  # no snapshot yet, still collecting
    assert c.cpu_round is not None
    c.tick(2.6)  # abandoned and started again, with a fresh 2.5 s deadline
    assert c.abort_count == 1 and c.cpu_round.round == 2 and c.cpu_round.deadline == 2.6 + 2.5
