"""Trend math, exactly as the reference defines it."""

from __future__ import annotations

import math

import pytest

import flodl as fl


def T(*values: float) -> fl.Trend:
    return fl.Trend("m", tuple(values))


def test_basic_statistics():
    t = T(10, 8, 6, 4, 2)
    assert (len(t), t.last(), t.mean(), t.min(), t.max()) == (5, 2, 6, 2, 10)


def test_last_n():
    t = T(1, 2, 3, 4, 5)
    assert t.last(3) == [3, 4, 5] and t.last(10) == [1, 2, 3, 4, 5] and t.last(0) == []
    with pytest.raises(ValueError):
        t.last(-1)


def test_linear_decrease():
    t = T(10, 8, 6, 4, 2)
    assert t.slope() == -2.0 and t.improving() and not t.stalled(tol=0.1)


def test_increase():
    t = T(1, 3, 5, 7)
    assert t.slope() == 2.0 and not t.improving()


def test_flat_is_stalled():
    t = T(3, 3, 3, 3)
    assert t.slope() == 0.0 and t.stalled(tol=0.01)


def test_window():
    t = T(1, 5, 10, 8, 6)
    assert t.slope() > 0 and t.slope(3) < 0 and t.improving(3)
    assert t.slope(3) == pytest.approx(-2.0)


def test_converged_uses_population_variance():
    t = T(5, 5.01, 4.99, 5, 5.01)
    assert t.converged(tol=1e-3) and not t.converged(tol=1e-5)
    # population variance of [1, 3] is 1 (the sample variance would be 2)
    assert T(1, 3).converged(tol=1.01) and not T(1, 3).converged(tol=0.99)


def test_empty_and_single_point():
    e = T()
    assert e.is_empty() and e.last() == 0 and e.mean() == 0 and e.slope() == 0
    assert not e.converged() and e.min() == math.inf and e.max() == -math.inf
    one = T(42)
    assert one.last() == 42 and one.slope() == 0 and not one.converged()
    assert one.stalled(tol=1e-9)  # as the reference: fewer than 2 points count as stalled


def test_negative_window_is_rejected():
    with pytest.raises(ValueError, match="window"):
        T(1, 2).slope(-1)


def test_groups():
    down = fl.TrendGroup([T(10, 8, 6), T(5, 4, 3)])
    assert down.all_improving() and down.any_improving()
    mixed = fl.TrendGroup([fl.Trend("a", (10, 8, 6, 4, 2)), fl.Trend("b", (1, 2, 3, 4, 5))])
    assert not mixed.all_improving() and mixed.any_improving()
    assert mixed.slopes() == [-2.0, 1.0] and mixed.mean_slope() == -0.5
    assert mixed.names == ["a", "b"]
    empty = fl.TrendGroup()
    assert empty.is_empty() and not empty.all_improving() and not empty.any_improving()
    assert empty.mean_slope() == 0 and not empty.all_stalled() and not empty.all_converged()
    flat = fl.TrendGroup([T(1, 1), T(2, 2.0000001)])
    assert flat.all_stalled() and flat.any_stalled() and flat.all_converged()
    assert flat.any_converged()
