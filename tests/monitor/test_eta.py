"""The adaptive ETA: setup time does not poison the estimate; it follows speed changes."""

from __future__ import annotations

import pytest

from flodl.monitor.eta import EtaEstimator


def test_first_epoch_estimate_uses_its_own_duration():
    eta = EtaEstimator(10, started_at=100.0)
    assert eta.update(0, now=104.0) == pytest.approx(36.0)  # 9 left x 4 s


def test_setup_heavy_first_epoch_is_dropped_once_a_steady_interval_exists():
    eta = EtaEstimator(100, started_at=0.0)
    eta.update(0, now=30.0)  # 30 s: dataset download + compilation + epoch
    # whole-run average (the original) would say 15 s/epoch x 98 = 1470 s
    assert eta.update(1, now=31.0) == pytest.approx(98.0)


def test_moving_average_follows_a_slowdown_without_jumping():
    eta = EtaEstimator(100, started_at=0.0, smoothing=0.5)
    eta.update(0, now=1.0)
    eta.update(1, now=2.0)  # 1 s/epoch
    left = eta.update(2, now=4.0)  # this epoch took 2 s: rate moves halfway, to 1.5 s
    assert left == pytest.approx(1.5 * 97)
    assert eta.seconds_per_epoch == pytest.approx(1.5)


def test_sparse_logging_divides_the_interval_by_the_epochs_it_covers():
    eta = EtaEstimator(100, started_at=0.0)
    eta.update(9, now=10.0)  # logged every 10 epochs, 1 s each
    assert eta.update(19, now=20.0) == pytest.approx(80.0)


def test_resume_counts_from_the_start_epoch():
    eta = EtaEstimator(100, started_at=0.0, start_epoch=50)
    assert eta.update(50, now=2.0) == pytest.approx(2.0 * 49)


def test_no_estimate_when_done_or_before_any_progress():
    eta = EtaEstimator(3, started_at=0.0)
    assert eta.seconds_per_epoch is None
    assert eta.update(2, now=3.0) is None  # last epoch
    repeat = EtaEstimator(5, started_at=0.0)
    assert repeat.update(0, now=1.0) == pytest.approx(4.0)
    assert repeat.update(0, now=9.0) == pytest.approx(4.0)  # same epoch again: nothing new learned


def test_bad_smoothing_is_rejected():
    with pytest.raises(ValueError, match="smoothing"):
        EtaEstimator(3, started_at=0.0, smoothing=0)
