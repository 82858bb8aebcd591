"""Where flodl's schedulers and clipping differ from torch's, shown side by side (docs/training.md)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.optim import lr_scheduler as tls

from flodl.optim import (
    CosineScheduler,
    CyclicLR,
    ExponentialLR,
    MultiStepLR,
    OneCycleLR,
    PlateauScheduler,
    StepDecay,
    WarmupScheduler,
    clip_grad_norm,
)


def _opt(lr: float = 0.1) -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)


def torch_curve(make, steps: int, lr: float = 0.1) -> list[float]:
    """The lr torch's scheduler gives at steps 0..steps-1 (step() after each optimizer step)."""
    opt = _opt(lr)
    sched = make(opt)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_step_decay_matches_step_lr_up_to_rounding():
    ours = StepDecay(0.1, 10, 0.9).curve(100)
    theirs = torch_curve(lambda o: tls.StepLR(o, 10, 0.9), 100)
    assert ours == pytest.approx(theirs, rel=1e-14)


def test_exponential_agrees_to_rounding_but_not_bit_for_bit():
    # torch multiplies the previous lr by gamma each step (chained); flodl computes base * powi().
    ours = ExponentialLR(0.1, 0.9).curve(100)
    theirs = torch_curve(lambda o: tls.ExponentialLR(o, 0.9), 100)
    assert ours == pytest.approx(theirs, rel=1e-13)
    assert sum(a != b for a, b in zip(ours, theirs, strict=True)) > 0


def test_multistep_matches_torch_up_to_rounding():
    ours = MultiStepLR(0.1, [30, 10, 10], 0.5).curve(50)
    theirs = torch_curve(lambda o: tls.MultiStepLR(o, [10, 10, 30], 0.5), 50)
    assert ours == pytest.approx(theirs, rel=1e-14)


def test_cosine_stays_at_min_where_cosine_annealing_climbs_back():
    ours = CosineScheduler(0.1, 0.001, 100).curve(201)
    theirs = torch_curve(lambda o: tls.CosineAnnealingLR(o, T_max=100, eta_min=0.001), 201)
    assert ours[:101] == pytest.approx(theirs[:101], rel=1e-9)
    assert ours[200] == 0.001
    assert theirs[200] == pytest.approx(0.1, rel=1e-6)  # torch's curve is periodic (2 * T_max)


def test_one_cycle_differs_from_torch_one_cycle():
    ours = OneCycleLR(0.01, 100)
    theirs = torch_curve(
        lambda o: tls.OneCycleLR(o, max_lr=0.01, total_steps=100, cycle_momentum=False), 100
    )
    assert ours.lr(0) == pytest.approx(theirs[0])  # both start at max/25
    assert theirs[29] == pytest.approx(0.01) and ours.lr(29) < 0.01  # torch peaks one step earlier
    assert ours.lr(15) == pytest.approx(0.0052)  # linear warmup ...
    assert theirs[15] != pytest.approx(0.0052, rel=1e-3)  # ... torch's warmup is a cosine
    assert theirs[99] < 1e-6 < ours.lr(99)  # torch ends at max/25/1e4, flodl at max/25


def test_cyclic_matches_triangular_cyclic_lr_up_to_rounding():
    ours = CyclicLR(0.001, 0.01, 10, 6).curve(64)
    theirs = torch_curve(
        lambda o: tls.CyclicLR(
            o, 0.001, 0.01, step_size_up=10, step_size_down=6, cycle_momentum=False
        ),
        64,
    )
    assert ours == pytest.approx(theirs, rel=1e-12)


def test_warmup_reaches_target_one_step_before_linear_lr():
    ours = WarmupScheduler(StepDecay(0.1, 1000, 1.0), 0.1, 10)
    theirs = torch_curve(lambda o: tls.LinearLR(o, start_factor=0.1, total_iters=10), 12)
    assert ours.lr(0) == pytest.approx(theirs[0])  # both start at target / W here
    assert ours.lr(9) == 0.1 and theirs[9] < 0.1  # torch reaches the target at step W


def test_plateau_reduces_one_observation_earlier_and_has_no_threshold():
    metrics = [1.0, 1.1, 1.2, 1.3]
    ours = PlateauScheduler(0.1, 3, 0.5, 0.0)
    opt = _opt()
    theirs = tls.ReduceLROnPlateau(opt, patience=3, factor=0.5)
    for m in metrics:
        ours.observe(m)
        theirs.step(m)
    assert ours.lr() == 0.05 and opt.param_groups[0]["lr"] == 0.1  # torch: > patience bad epochs
    # torch ignores improvements smaller than its 1e-4 relative threshold; flodl takes any.
    ours, opt = PlateauScheduler(0.1, 1, 0.5, 0.0), _opt()
    theirs = tls.ReduceLROnPlateau(opt, patience=0, factor=0.5)
    for m in (1.0, 0.99995):
        ours.observe(m)
        theirs.step(m)
    assert ours.lr() == 0.1 and opt.param_groups[0]["lr"] == 0.05


def test_clip_grad_norm_leaves_nan_gradients_alone_where_torch_poisons_them():
    a = torch.zeros(2, requires_grad=True)
    b = torch.zeros(2, requires_grad=True)
    a.grad = torch.tensor([math.nan, 1.0])
    b.grad = torch.tensor([3.0, 4.0])
    assert math.isnan(clip_grad_norm([a, b], 1.0))
    assert b.grad.tolist() == [3.0, 4.0]
    torch.nn.utils.clip_grad_norm_([a, b], 1.0)
    assert torch.isnan(b.grad).all()
