"""Convergence guard, partitions, chunk pools and metrics aggregation."""

from __future__ import annotations

import pytest

from flodl.train.errors import TrainerConfigError
from flodl.train.guard import HISTORY, ConvergenceGuard, GuardAction
from flodl.train.metrics import MetricsMsg, aggregate_epoch_metrics
from flodl.train.partition import ChunkPool, shard_sizes, throughput_sizes

S, G = GuardAction.STABLE, GuardAction.SUPPRESS_GROWTH


def feed(guard: ConvergenceGuard, values: list[float], **kw) -> list[GuardAction]:
    return [guard.observe([v, v / 2], **kw) for v in values]


def test_guard_suppresses_only_a_rising_trend_above_threshold():
    assert feed(ConvergenceGuard(0.05), [0.06, 0.07, 0.08]) == [S, S, G]
    assert feed(ConvergenceGuard(0.05), [0.01, 0.02, 0.03]) == [S, S, S]  # rising but small
    assert feed(ConvergenceGuard(0.05), [0.1, 0.1, 0.1]) == [S, S, S]  # flat
    assert feed(ConvergenceGuard(0.05), [0.01, 0.9, 0.02, 0.01]) == [S, S, S, S]  # a spike


def test_guard_disabled_or_sync_policy_is_always_stable():
    assert feed(ConvergenceGuard(0.05, enabled=False), [0.06, 0.07, 0.08]) == [S, S, S]
    assert feed(ConvergenceGuard(0.05), [0.06, 0.07, 0.08], sync_policy=True) == [S, S, S]


def test_guard_history_is_capped():
    guard = ConvergenceGuard()
    feed(guard, [0.1 * i for i in range(10)])
    assert len(guard.history) == HISTORY


def test_throughput_sizes_give_the_faster_rank_more():
    assert throughput_sizes(90, [5.0, 10.0]) == [60, 30]
    fast_first = throughput_sizes(101, [5.0, 10.0, 20.0])
    assert sum(fast_first) == 101 and fast_first[0] > fast_first[1] > fast_first[2]
    assert sum(throughput_sizes(10, [0.0, 1.0])) == 10  # a zero timing is clamped, not a crash


def test_negative_partition_ratios_are_rejected_at_configuration():
    from flodl.train.coordinator import CoordinatorConfig

    with pytest.raises(TrainerConfigError, match="partition_ratios must be finite and >= 0"):
        CoordinatorConfig(
            world=2,
            num_epochs=1,
            dataset_size=100,
            batch_size=10,
            partition_ratios=[1, -1],
            progressive=False,
        )


def test_shard_sizes():
    assert shard_sizes(11, [0.5, 0.5]) == [6, 5]
    assert shard_sizes(10, [0.5, 0.3, 0.2]) == [5, 3, 2]
    assert shard_sizes(3, [0.98, 0.01, 0.01]) == [1, 1, 1]
    with pytest.raises(TrainerConfigError):
        shard_sizes(1, [0.5, 0.5])


def test_chunk_pool_hands_out_consecutive_slices():
    pool = ChunkPool(epoch=0, size=10, world=2)
    chunks = [pool.take(0, 3), pool.take(1, 3), pool.take(0, 3), pool.take(1, 3)]
    assert chunks == [(0, 3), (3, 3), (6, 3), (9, 1)]
    assert pool.take(0, 3) is None
    assert pool.take(0, 0) == (10, 0)


def test_chunk_pool_done_only_when_everything_completed():
    pool = ChunkPool(epoch=0, size=8, world=2)
    pool.take(0, 4)
    pool.take(1, 4)
    assert not pool.done
    pool.complete(0, 4)
    assert pool.in_flight(1) == 4
    assert not pool.done
    pool.complete(1, 4)
    assert pool.done
    assert ChunkPool(epoch=1, size=0, world=2).done


def test_metrics_are_batch_weighted():
    msgs = [
        MetricsMsg(0, 0, 0.5, 60, 10.0, 600, {"acc": (54.0, 60)}, device_index=0),
        MetricsMsg(1, 0, 0.7, 40, 20.0, 400, {"acc": (20.0, 40)}, device_index=1),
    ]
    m = aggregate_epoch_metrics(0, msgs, world=2)
    assert m.avg_loss == pytest.approx(0.58)
    assert m.epoch_ms == 20.0
    assert m.scalars["acc"] == pytest.approx((0.9 * 60 + 0.5 * 40) / 100)
    assert m.per_rank == [{"acc": 0.9}, {"acc": 0.5}]
    assert m.per_rank_throughput == [60.0, 20.0]
    assert m.per_rank_batch_share == [0.6, 0.4]
    assert m.device_indices == [0, 1]
    assert m.as_dict()["loss"] == pytest.approx(0.58)


def test_chunk_messages_collapse_to_one_entry_per_rank():
    msgs = [
        MetricsMsg(0, 0, 1.0, 10, 5.0, 100),
        MetricsMsg(0, 0, 3.0, 10, 6.0, 100),
        MetricsMsg(1, 0, 2.0, 20, 9.0, 200),
    ]
    m = aggregate_epoch_metrics(0, msgs, world=2, epoch_ms=15.0)
    assert len(m.per_rank_batch_share) == 2
    assert m.avg_loss == pytest.approx((10 + 30 + 40) / 40)
    assert m.epoch_ms == 15.0
    assert m.per_rank_batch_share == [0.5, 0.5]


def test_blame_names_the_first_cause_not_its_consequences_or_a_silent_heartbeat():
    from flodl.train.builder_launch import blame

    raised = "Traceback ...\nValueError: injected dataset failure on rank 0"
    lost_peer = "Traceback ...\nRuntimeError: [gloo] Connection closed by peer [127.0.0.1]:1234"
    collective = "Traceback ...\nflodl.train.errors.CollectiveError: all-reduce failed"
    # Rank 0 raised first; rank 1 then lost it in a collective: rank 0, whatever exits first.
    assert blame({0: 1, 1: 1}, {0: (1, raised), 1: (2, lost_peer)}, set()) == 0
    assert blame({0: None, 1: 1}, {0: (1, raised), 1: (2, lost_peer)}, set()) == 0
    # A consequence reported before the cause's own report still is not the cause.
    assert blame({0: 1, 1: 1}, {0: (2, raised), 1: (1, collective)}, set()) == 0
    # Rank 1 killed outright (no report): its survivor's failed collective is the consequence.
    assert blame({0: 1, 1: -9}, {0: (1, collective)}, set()) == 1
    # A rank stopped for a silent heartbeat is the cause of its peer's failed collective.
    assert blame({0: 1, 1: -9}, {0: (1, lost_peer), 1: (2, lost_peer)}, {1}) == 1
    # Only consequences: the first report.
    assert blame({0: 1, 1: 1}, {0: (2, lost_peer), 1: (1, collective)}, set()) == 1
    # Two independent causes: the first to report.
    assert blame({0: 1, 1: 1}, {0: (2, raised), 1: (1, raised)}, set()) == 1
