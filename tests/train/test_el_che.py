"""El Che cadence calculator: its pinned behaviours (the Rust flodl's, so cadences match)."""

from __future__ import annotations

import pytest

from flodl.train.el_che import ElChe
from flodl.train.errors import TrainerConfigError


def quiet(world: int = 2, anchor: int = 10, **kw) -> ElChe:
    """Overhead target 0.5 keeps the anchor auto-tune out of count tests."""
    return ElChe(world, anchor, overhead_target=0.5, **kw)


def test_new_el_che_gives_every_rank_the_anchor():
    el = ElChe(3, 7)
    assert el.batch_counts == [7, 7, 7]
    assert el.total_batches == 21
    assert not el.calibrated
    assert el.anchor_wall_ms() == 0.0


@pytest.mark.parametrize(
    ("world", "anchor", "message"),
    [(1, 10, "at least 2 devices"), (2, 0, "anchor must be >= 1")],
)
def test_invalid_construction_is_a_clear_error(world, anchor, message):
    with pytest.raises(TrainerConfigError, match=message):
        ElChe(world, anchor)


def test_first_report_gives_the_fast_rank_proportionally_more():
    el = quiet()
    el.report_timing([500.0, 1000.0], [10, 10], 0.0)
    assert el.batch_counts == [20, 10]
    assert el.calibrated
    assert el.anchor_wall_ms() == pytest.approx(10 * 100.0)


def test_uneven_split_rounds_to_22_or_23():
    el = quiet()
    el.report_timing([730.0, 1640.0], [10, 10], 0.0)
    assert el.batch_counts[1] == 10
    assert el.batch_counts[0] in (22, 23)


def test_three_ranks():
    el = quiet(3)
    el.report_timing([333.0, 500.0, 1000.0], [10, 10, 10], 0.0)
    assert el.batch_counts == [30, 20, 10]


def test_sync_overhead_raises_the_anchor_multiplicatively():
    el = ElChe(2, 10, overhead_target=0.10)
    el.report_timing([1000.0, 1000.0], [10, 10], 500.0)
    assert el.anchor == 50
    assert el.batch_counts == [50, 50]


def test_overhead_with_a_speed_split():
    el = ElChe(2, 10, overhead_target=0.10)
    el.report_timing([500.0, 1000.0], [10, 10], 400.0)
    assert el.anchor == 40
    assert el.batch_counts == [80, 40]


def test_anchor_never_exceeds_max_anchor():
    el = ElChe(2, 10, overhead_target=0.01, max_anchor=30)
    el.report_timing([100.0, 100.0], [10, 10], 500.0)
    assert el.anchor == 30


def test_cheap_sync_leaves_the_anchor_alone_and_never_below_initial():
    el = ElChe(2, 10, overhead_target=0.10)
    el.report_timing([1000.0, 1000.0], [10, 10], 5.0)
    assert el.anchor == 10


def test_anchor_decays_by_one_when_sync_becomes_cheap():
    el = ElChe(2, 10, overhead_target=0.10)
    el.report_timing([1000.0, 1000.0], [10, 10], 500.0)
    assert el.anchor == 50
    el.report_timing([5000.0, 5000.0], [50, 50], 5.0)
    assert el.anchor == 49


def test_stable_ratio_keeps_counts():
    el = quiet()
    el.report_timing([500.0, 1000.0], [10, 10], 0.0)
    for _ in range(4):
        el.report_timing([1000.0, 1000.0], [20, 10], 0.0)
        assert el.batch_counts == [20, 10]


def test_clamp_total_keeps_proportions_and_sums_exactly():
    el = quiet()
    el.report_timing([500.0, 1000.0], [10, 10], 0.0)
    clamped = el.clamp_total(15)
    assert sum(clamped) == 15
    assert clamped[0] >= clamped[1]
    assert el.clamp_total(100) == [20, 10]
    assert sum(ElChe(3, 10).clamp_total(7)) == 7


def test_overhead_target_is_clamped_and_max_batch_diff_reflected():
    assert ElChe(2, overhead_target=0.0001).overhead_target == 0.01
    assert ElChe(2, overhead_target=3.0).overhead_target == 0.50
    assert ElChe(2, max_batch_diff=3).max_batch_diff == 3


def test_max_batch_diff_clamps_changes_after_the_first_calibration():
    el = quiet(max_batch_diff=3)
    el.report_timing([1000.0, 200.0], [10, 10], 0.0)  # first calibration: unclamped
    assert el.batch_counts == [10, 50]
    el.report_timing([1000.0, 2000.0], [10, 50], 0.0)  # rank 1 suddenly much slower
    assert el.batch_counts[1] == 47


@pytest.mark.parametrize(
    ("world", "slow", "ratio", "expected"),
    [
        (2, 1, 2.0, [20, 10]),
        (2, 1, 2.3, [23, 10]),
        (2, 0, 3.0, [10, 30]),
        (2, 1, 1.0, [10, 10]),
        (2, 1, 0.5, [10, 10]),
        (3, 2, 2.0, [20, 20, 10]),
        (3, 0, 1.5, [10, 15, 15]),
    ],
)
def test_speed_hints(world, slow, ratio, expected):
    el = ElChe(world, 10).with_speed_ratio(slow, ratio)
    assert el.batch_counts == expected
    assert el.has_speed_hint == (len(set(expected)) > 1)


def test_speed_hint_rank_out_of_range():
    with pytest.raises(TrainerConfigError, match="slow_rank 2 is not a rank of this run"):
        ElChe(2, 10).with_speed_ratio(2, 2.0)


def test_max_anchor_one_pins_the_anchor():
    el = ElChe(2, 10, max_anchor=1).with_speed_ratio(1, 2.0)
    assert el.batch_counts == [2, 1]
    el.report_timing([100.0, 100.0], [2, 1], 1000.0)
    assert el.anchor == 1


def test_nudge_anchor_down():
    el = quiet(anchor=20)
    el.report_timing([500.0, 1000.0], [20, 20], 0.0)
    assert el.batch_counts == [40, 20]
    el.nudge_anchor_down(0.5)
    assert el.anchor == 10
    assert el.batch_counts == [20, 10]
    el.nudge_anchor_down(2.0)  # never increases
    assert el.anchor == 10
    small = ElChe(2, 5)
    small.nudge_anchor_down(0.1)
    assert small.anchor == 1


def test_wrong_speed_hint_self_corrects_in_one_report():
    el = quiet().with_speed_ratio(0, 2.0)  # claims rank 0 is the slow one
    assert el.batch_counts == [10, 20]
    # Measured: rank 0 at 50 ms/batch, rank 1 at 100 ms/batch — rank 1 is really the slow one.
    el.report_timing([500.0, 2000.0], [10, 20], 0.0)
    assert el.batch_counts == [20, 10]


def test_report_timing_rejects_wrong_lengths():
    with pytest.raises(TrainerConfigError, match="one value per rank"):
        ElChe(2).report_timing([1.0], [1, 1], 0.0)


def test_no_valid_timing_stays_uncalibrated():
    el = ElChe(2)
    el.report_timing([0.0, 0.0], [0, 0], 10.0)
    assert not el.calibrated
    assert el.batch_counts == [10, 10]


def test_clamp_total_trims_the_largest_when_the_floor_of_one_overshoots():
    el = ElChe(3, 10)
    el.batch_counts = [1, 1, 100]
    assert el.clamp_total(3) == [1, 1, 1]
    assert el.clamp_total(5) == [1, 1, 3]
    with pytest.raises(TrainerConfigError, match="cannot give each of 3 ranks one"):
        el.clamp_total(2)


def test_window_scales_near_the_epoch_end_and_ends_below_one_batch_per_rank():
    el = ElChe(2, 10).with_speed_ratio(1, 3.0)
    assert el.window(1000) == [30, 10]
    assert el.window(40) == [30, 10]
    counts = el.window(9)
    assert sum(counts) == 9 and counts[0] > counts[1] >= 1
    assert el.window(2) == [1, 1]
    assert el.window(1) is None and el.window(0) is None
