"""Each scheduler against hand-computed values of the original's formulas, edge cases included.

Literal expected values are what the original (Rust, f64) computes; where float rounding makes
the literal surprising, the comment says why.
"""

from __future__ import annotations

import itertools
import math

import pytest

import flodl as fl
from flodl.optim import (
    CosineScheduler,
    CyclicLR,
    ExponentialLR,
    MultiStepLR,
    OneCycleLR,
    OptimError,
    PlateauScheduler,
    StepDecay,
    WarmupScheduler,
)
from flodl.optim.schedulers import powi, round_half_away


def test_schedulers_are_reachable_from_the_namespace():
    assert fl.optim.CosineScheduler is CosineScheduler
    assert isinstance(StepDecay(0.1, 1, 0.5), fl.optim.Scheduler)


# -- the two rounding rules the original relies on ----------------------------------------------


def test_powi_is_binary_exponentiation_not_libm_pow():
    # 0.9**4 by squaring: (0.9*0.9)*(0.9*0.9) = 0.81000000000000005**2
    assert powi(0.9, 4) == 0.6561000000000001
    assert 0.9**4 == 0.6561  # libm pow rounds differently: the port must not use it
    assert powi(0.5, 3) == 0.125
    assert powi(2.0, -2) == 0.25
    assert powi(0.3, 0) == 1.0


@pytest.mark.parametrize(
    ("x", "expected"),
    [
        (0.5, 1),
        (1.5, 2),
        (2.5, 3),  # Python's round(2.5) == 2 (banker's); Rust's f64::round gives 3
        (-2.5, -3),
        (0.49999999999999994, 0),  # floor(x + 0.5) would wrongly give 1
        (4503599627370497.0, 4503599627370497),
        (7.4, 7),
    ],
)
def test_round_half_away_from_zero(x, expected):
    assert round_half_away(x) == expected


# -- StepDecay ------------------------------------------------------------------------------------


def test_step_decay_values():
    s = StepDecay(0.1, 10, 0.5)
    assert [s.lr(k) for k in (0, 9, 10, 19, 20, 30)] == [0.1, 0.1, 0.05, 0.05, 0.025, 0.0125]
    assert s(10) == 0.05  # callable like a LambdaLR lambda


def test_step_decay_uses_powi_rounding():
    s = StepDecay(0.1, 1, 0.9)
    assert s.lr(4) == 0.06561000000000002  # 0.1 * powi(0.9, 4), not 0.1 * 0.9**4 == 0.06561


@pytest.mark.parametrize("size", [0, -1])
def test_step_decay_rejects_a_non_positive_step_size(size):
    # The original panics (division by zero) at the first lr() call; we refuse at construction.
    with pytest.raises(OptimError, match="step_size must be >= 1"):
        StepDecay(0.1, size, 0.5)


@pytest.mark.parametrize("bad", [-1, 1.5, "3", None])
def test_steps_must_be_non_negative_integers(bad):
    with pytest.raises(OptimError, match="step"):
        StepDecay(0.1, 10, 0.5).lr(bad)


def test_optim_errors_are_value_errors_and_flodl_errors():
    with pytest.raises(ValueError):
        CosineScheduler(0.1, 0.0, 0)
    with pytest.raises(fl.FlodlError):
        CosineScheduler(0.1, 0.0, 0)


# -- CosineScheduler ------------------------------------------------------------------------------


def test_cosine_boundaries_and_midpoints():
    s = CosineScheduler(0.1, 0.001, 100)
    assert s.lr(0) == 0.1
    assert s.lr(100) == 0.001  # cos(pi) == -1 exactly
    assert s.lr(50) == pytest.approx(0.0505, rel=1e-15)  # min + (base - min) / 2
    # 0.001 + 0.0495 * (1 + sqrt(2)/2)
    assert s.lr(25) == pytest.approx(0.08550178566873411, rel=1e-15)


def test_cosine_stays_at_min_after_total():
    s = CosineScheduler(0.1, 0.001, 100)
    assert s.lr(101) == s.lr(150) == s.lr(10_000) == 0.001


def test_cosine_zero_total_is_refused_not_nan():
    with pytest.raises(OptimError, match="total_steps must be >= 1"):
        CosineScheduler(0.1, 0.001, 0)


def test_cosine_single_step():
    s = CosineScheduler(0.1, 0.0, 1)
    assert (s.lr(0), s.lr(1), s.lr(2)) == (0.1, 0.0, 0.0)


# -- ExponentialLR --------------------------------------------------------------------------------


def test_exponential_values():
    s = ExponentialLR(0.1, 0.9)
    assert s.lr(0) == 0.1
    assert s.lr(1) == 0.09000000000000001  # 0.1 * 0.9 in binary floating point
    assert s.lr(4) == 0.06561000000000002
    assert s.lr(10) == pytest.approx(0.1 * 0.9**10, rel=1e-14)


# -- MultiStepLR ----------------------------------------------------------------------------------


def test_multistep_every_boundary():
    s = MultiStepLR(0.1, [30, 60, 90], 0.1)
    expected = {0: 0.1, 29: 0.1, 30: 0.01, 59: 0.01, 60: 0.001, 89: 0.001, 90: 1e-4, 500: 1e-4}
    for step, lr in expected.items():
        assert s.lr(step) == pytest.approx(lr, rel=1e-14), step
    assert s.lr(30) == 0.1 * 0.1  # one multiplication: 0.010000000000000002


def test_multistep_sorts_milestones_and_counts_duplicates():
    assert MultiStepLR(0.1, [60, 30, 90], 0.5).milestones == (30, 60, 90)
    assert MultiStepLR(0.1, [60, 30, 90], 0.5).lr(30) == 0.05
    twice = MultiStepLR(0.1, [10, 10], 0.5)
    assert (twice.lr(9), twice.lr(10)) == (0.1, 0.025)


def test_multistep_rejects_negative_milestones():
    with pytest.raises(OptimError, match="milestone"):
        MultiStepLR(0.1, [10, -1], 0.5)


def test_multistep_without_milestones_is_constant():
    assert MultiStepLR(0.1, [], 0.5).lr(1000) == 0.1


# -- OneCycleLR -----------------------------------------------------------------------------------


def test_one_cycle_boundaries():
    s = OneCycleLR(0.01, 100)
    assert s.warmup_steps == 30
    assert s.lr(0) == 0.01 / 25  # 0.0004: starts at max/25
    assert s.lr(15) == pytest.approx(0.0052, rel=1e-15)  # halfway up, linear
    assert s.lr(30) == pytest.approx(0.01, rel=1e-15)  # peak at the end of warmup
    assert s.lr(65) == pytest.approx(0.0052, rel=1e-15)  # halfway down the cosine
    assert s.lr(100) == 0.01 / 25  # ends at max/25, not torch's max/25/1e4
    assert s.lr(1000) == s.lr(100)  # clamped past the end


def test_one_cycle_is_monotone_up_then_down():
    curve = OneCycleLR(0.01, 100).curve(101)
    assert all(a <= b for a, b in itertools.pairwise(curve[:31]))
    assert all(a >= b for a, b in itertools.pairwise(curve[30:]))


def test_one_cycle_custom_warmup_peaks_there():
    s = OneCycleLR(0.01, 100, warmup_frac=0.1)
    assert s.warmup_steps == 10
    assert s.lr(10) == pytest.approx(0.01, rel=1e-15)
    assert s.lr(9) < s.lr(10)


def test_original_constructor_names():
    assert OneCycleLR.with_warmup_frac(0.01, 100, 0.1) == OneCycleLR(0.01, 100, warmup_frac=0.1)
    assert CyclicLR.asymmetric(0.0, 1.0, 2, 8) == CyclicLR(0.0, 1.0, 2, 8)


def test_one_cycle_warmup_rounds_half_away_from_zero():
    # 25 * 0.1 == 2.5: Rust rounds to 3 warmup steps; Python's round() would give 2.
    s = OneCycleLR(0.01, 25, warmup_frac=0.1)
    assert s.warmup_steps == 3
    assert s.lr(2) < 0.01
    assert s.lr(3) == pytest.approx(0.01, rel=1e-15)


def test_one_cycle_frac_is_clamped_and_zero_warmup_starts_at_peak():
    assert OneCycleLR(0.01, 100, warmup_frac=1.7).warmup_steps == 100
    assert OneCycleLR(0.01, 100, warmup_frac=-0.5).warmup_steps == 0
    assert OneCycleLR(0.01, 100, warmup_frac=0.0).lr(0) == pytest.approx(0.01, rel=1e-15)
    full = OneCycleLR(0.01, 10, warmup_frac=1.0)
    assert full.lr(10) == pytest.approx(0.01, rel=1e-15)  # decay phase of length max(0, 1)


def test_one_cycle_zero_total_is_constant_peak():
    s = OneCycleLR(0.01, 0)
    assert s.lr(0) == s.lr(5) == pytest.approx(0.01, rel=1e-15)


def test_one_cycle_rejects_nan_fraction():
    with pytest.raises(OptimError, match="warmup_frac"):
        OneCycleLR(0.01, 100, warmup_frac=float("nan"))


# -- CyclicLR -------------------------------------------------------------------------------------


def test_cyclic_symmetric_values():
    s = CyclicLR(0.001, 0.01, 10)
    assert s.lr(0) == 0.001
    assert s.lr(5) == pytest.approx(0.0055, rel=1e-15)
    assert s.lr(10) == 0.010000000000000002  # 0.001 + 0.009 * 1.0: peak exactly at pos == up
    assert s.lr(15) == pytest.approx(0.0055, rel=1e-15)
    assert s.lr(20) == 0.001
    assert s.lr(25) == s.lr(5)  # no amplitude decay between cycles


def test_cyclic_asymmetric():
    s = CyclicLR(0.0, 1.0, step_size_up=2, step_size_down=8)
    assert [s.lr(k) for k in (0, 1, 2, 6, 9, 10)] == [0.0, 0.5, 1.0, 0.5, 0.125, 0.0]


def test_cyclic_zero_up_is_refused():
    # The original divides 0/0 at the start of every cycle (NaN); with up = down = 0 it panics.
    with pytest.raises(OptimError, match="step_size_up must be >= 1"):
        CyclicLR(0.001, 0.01, 0)


def test_cyclic_zero_down_is_a_saw_tooth():
    s = CyclicLR(0.0, 1.0, step_size_up=4, step_size_down=0)
    assert [s.lr(k) for k in range(6)] == [0.0, 0.25, 0.5, 0.75, 0.0, 0.25]


# -- WarmupScheduler ------------------------------------------------------------------------------


def test_warmup_ramp_then_inner_restarted():
    s = WarmupScheduler(CosineScheduler(0.1, 0.001, 90), 0.1, 10)
    assert s.lr(0) == 0.01  # target * 1 / W: step 0 is not zero
    assert s.lr(4) == 0.05
    assert s.lr(9) == 0.1  # target reached at W - 1
    assert s.lr(10) == 0.1  # inner.lr(0)
    assert s.lr(55) == pytest.approx(0.0505, rel=1e-15)  # inner.lr(45)
    assert s.lr(100) == 0.001  # inner.lr(90)


def test_warmup_inner_counts_from_zero():
    s = WarmupScheduler(StepDecay(1.0, 1, 0.5), 2.0, 3)
    assert [s.lr(k) for k in range(6)] == [2.0 / 3, 4.0 / 3, 2.0, 1.0, 0.5, 0.25]


def test_warmup_zero_always_delegates():
    inner = ExponentialLR(0.1, 0.5)
    s = WarmupScheduler(inner, 123.0, 0)
    assert [s.lr(k) for k in range(4)] == [inner.lr(k) for k in range(4)]


def test_warmup_composes_with_any_lr_object():
    class Constant:
        def lr(self, step):
            return 0.3

    assert WarmupScheduler(Constant(), 0.3, 2).lr(5) == 0.3
    with pytest.raises(OptimError, match=r"\.lr\(step\)"):
        WarmupScheduler(42, 0.1, 3)


# -- PlateauScheduler -----------------------------------------------------------------------------


def test_plateau_patience_then_decay():
    s = PlateauScheduler(0.1, 3, 0.5, 1e-6)
    assert [s.observe(m) for m in (1.0, 1.1, 1.2)] == [0.1, 0.1, 0.1]
    assert s.observe(1.3) == 0.05  # third observation without improvement
    assert s.lr() == 0.05
    assert s.lr(123) == 0.05  # step is ignored (so apply() works with it)
    assert s.observe(0.5) == 0.05 and s.wait == 0  # improvement resets the count


def test_plateau_equal_is_not_an_improvement_and_min_lr_floors():
    s = PlateauScheduler(0.1, 0, 0.5, 0.03)
    assert s.observe(1.0) == 0.1  # first value improves on +inf
    assert s.observe(1.0) == 0.05  # patience 0: every non-improvement reduces
    assert s.observe(1.0) == 0.03  # max(0.025, min_lr)
    assert s.observe(1.0) == 0.03


def test_plateau_nan_never_improves():
    s = PlateauScheduler(0.1, 2, 0.1, 0.0)
    s.observe(math.nan)
    assert s.best == math.inf and s.wait == 1
    assert s.observe(math.nan) == pytest.approx(0.01)


def test_plateau_state_round_trip():
    s = PlateauScheduler(0.1, 2, 0.5, 0.0)
    for m in (1.0, 2.0):
        s.observe(m)
    t = PlateauScheduler(0.1, 2, 0.5, 0.0)
    t.load_state_dict(s.state_dict())
    assert t.observe(3.0) == s.observe(3.0) == 0.05
    assert "wait=0" in repr(t)


@pytest.mark.parametrize(
    ("state", "match"),
    [
        ([0.1, 1.0, 0], "takes the dict state_dict\\(\\) returns, got list"),
        ({"current": 0.1, "best": 1.0}, r"not a PlateauScheduler state; missing \['wait'\]"),
        ({"current": 0.1, "best": 1.0, "wait": 0, "lr": 1}, r"unknown \['lr'\]"),
        ({"current": -0.1, "best": 1.0, "wait": 0}, "'current' must be a finite number >= 0"),
        ({"current": "0.1", "best": 1.0, "wait": 0}, "'current' must be a finite number >= 0"),
        ({"current": 0.1, "best": math.nan, "wait": 0}, "'best' must be a number, got nan"),
        ({"current": 0.1, "best": 1.0, "wait": -1}, "'wait' must be >= 0, got -1"),
        ({"current": 0.1, "best": 1.0, "wait": 1.5}, "'wait' must be an integer, got float"),
    ],
)
def test_plateau_refuses_a_damaged_state_and_keeps_its_own(state, match):
    # Loaded unchecked before: a negative rate or a float wait count surfaced epochs later.
    s = PlateauScheduler(0.1, 2, 0.5, 0.0)
    s.observe(1.0)
    before = s.state_dict()
    with pytest.raises(OptimError, match=match):
        s.load_state_dict(state)
    assert s.state_dict() == before


def test_plateau_rejects_negative_patience():
    with pytest.raises(OptimError, match="patience"):
        PlateauScheduler(0.1, -1, 0.5, 0.0)


def test_schedulers_are_immutable_values():
    s = CosineScheduler(0.1, 0.0, 10)
    assert s == CosineScheduler(0.1, 0.0, 10)
    with pytest.raises(AttributeError):
        s.base_lr = 1.0  # type: ignore[misc]
    assert "CosineScheduler(base_lr=0.1" in repr(s)


# -- bad settings are refused when the scheduler is built ----------------------------------------

INNER = CosineScheduler(0.1, 0.0, 10)


@pytest.mark.parametrize(
    ("build", "name"),
    [
        # a negative gamma flips the sign every decay: [0.1, -0.05, ...] failed mid-run in set_lr
        (lambda v: ExponentialLR(0.1, v), "ExponentialLR gamma"),
        (lambda v: StepDecay(0.1, 2, v), "StepDecay gamma"),
        (lambda v: MultiStepLR(0.1, [3], v), "MultiStepLR gamma"),
        (lambda v: PlateauScheduler(0.1, 2, v, 0.0), "PlateauScheduler factor"),
        (lambda v: ExponentialLR(v, 0.5), "ExponentialLR base_lr"),
        (lambda v: StepDecay(v, 2, 0.5), "StepDecay base_lr"),
        (lambda v: MultiStepLR(v, [3], 0.5), "MultiStepLR base_lr"),
        (lambda v: CosineScheduler(v, 0.0, 10), "CosineScheduler base_lr"),
        (lambda v: CosineScheduler(0.1, v, 10), "CosineScheduler min_lr"),
        (lambda v: OneCycleLR(v, 10), "OneCycleLR max_lr"),
        (lambda v: CyclicLR(v, 0.1, 2), "CyclicLR base_lr"),
        (lambda v: CyclicLR(0.0, v, 2), "CyclicLR max_lr"),
        (lambda v: WarmupScheduler(INNER, v, 3), "WarmupScheduler target_lr"),
        (lambda v: PlateauScheduler(v, 2, 0.5, 0.0), "PlateauScheduler base_lr"),
        (lambda v: PlateauScheduler(0.1, 2, 0.5, v), "PlateauScheduler min_lr"),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
@pytest.mark.parametrize(
    "value", [-0.5, math.nan, math.inf, "0.1"], ids=["neg", "nan", "inf", "str"]
)
def test_negative_or_non_finite_rates_and_factors_are_refused_at_construction(build, name, value):
    with pytest.raises(OptimError, match=rf"{name} must be a finite number >= 0, got .*{value!r}"):
        build(value)


def test_zero_and_growing_factors_stay_allowed():
    assert ExponentialLR(0.1, 0.0).curve(2) == [0.1, 0.0]  # a rate of 0 is a valid rate
    assert StepDecay(0.1, 1, 2.0).curve(3) == [0.1, 0.2, 0.4]  # gamma > 1, as torch allows
    assert ExponentialLR(1, 0.5).lr(1) == 0.5  # integers are numbers ...
    assert repr(ExponentialLR(1, 0.5)) == "ExponentialLR(base_lr=1, gamma=0.5)"  # ... kept as given


def test_multistep_milestones_must_be_a_list_of_steps():
    with pytest.raises(OptimError, match="milestones must be a list of step numbers, got int 30"):
        MultiStepLR(0.1, 30, 0.5)  # type: ignore[arg-type]
    with pytest.raises(OptimError, match="milestone must be an integer, got float"):
        MultiStepLR(0.1, [30.5], 0.5)
