"""Driving real torch optimizers from flodl schedulers: apply(), ScheduledLR, set_lr helpers."""

from __future__ import annotations

import pytest
import torch

import flodl as fl
from flodl.optim import (
    CosineScheduler,
    CyclicLR,
    ExponentialLR,
    MultiStepLR,
    OneCycleLR,
    OptimError,
    PlateauScheduler,
    ScheduledLR,
    StepDecay,
    WarmupScheduler,
)

SCHEDULERS = [
    StepDecay(0.1, 3, 0.5),
    CosineScheduler(0.1, 0.001, 20),
    ExponentialLR(0.1, 0.9),
    MultiStepLR(0.1, [5, 10], 0.3),
    OneCycleLR(0.05, 20),
    CyclicLR(0.001, 0.01, 4, 6),
    WarmupScheduler(CosineScheduler(0.1, 0.0, 15), 0.1, 5),
]


def sgd(*groups: dict) -> torch.optim.SGD:
    if not groups:
        groups = ({"params": [torch.ones(3, requires_grad=True)]},)
    return torch.optim.SGD(list(groups), lr=1.0)


@pytest.mark.parametrize("sched", SCHEDULERS, ids=lambda s: type(s).__name__)
def test_apply_sets_the_exact_value_and_the_update_uses_it(sched):
    p = torch.ones(1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([p], lr=1.0)
    for step in range(25):
        before = p.item()
        assert fl.optim.apply(sched, opt, step) == sched.lr(step)
        assert opt.param_groups[0]["lr"] == sched.lr(step)
        p.grad = torch.ones_like(p)
        opt.step()
        assert p.item() == before - sched.lr(step)  # plain SGD: p -= lr * 1


@pytest.mark.parametrize("sched", SCHEDULERS, ids=lambda s: type(s).__name__)
def test_scheduled_lr_follows_the_scheduler_exactly(sched):
    w = torch.zeros(2, requires_grad=True)
    opt = torch.optim.Adam([w], lr=123.0)
    bridge = ScheduledLR(opt, sched)
    for step in range(25):
        assert opt.param_groups[0]["lr"] == sched.lr(step)
        assert bridge.get_last_lr() == [sched.lr(step)]
        (w.sum() ** 2).backward()
        opt.step()
        opt.zero_grad()
        bridge.step()


def test_lr_scale_per_group():
    a, b = torch.zeros(1, requires_grad=True), torch.zeros(1, requires_grad=True)
    opt = sgd({"params": [a]}, {"params": [b], "lr_scale": 0.1})
    assert fl.optim.apply(StepDecay(0.5, 1, 1.0), opt, 0) == 0.5
    assert [g["lr"] for g in opt.param_groups] == [0.5, 0.05]
    bridge = ScheduledLR(opt, StepDecay(0.2, 1, 0.5))
    assert bridge.get_last_lr() == [0.2, 0.2 * 0.1]


@pytest.mark.parametrize("scale", [-1.0, float("nan"), "0.1"], ids=["negative", "nan", "str"])
def test_a_bad_lr_scale_in_a_later_group_changes_no_group(scale):
    """Regression: groups were written one at a time, so group 0 changed before group 1 raised."""
    a, b = torch.zeros(1, requires_grad=True), torch.zeros(1, requires_grad=True)
    opt = sgd({"params": [a], "lr": 0.3}, {"params": [b], "lr": 0.7, "lr_scale": scale})
    with pytest.raises(fl.optim.OptimError, match=r"param group 1: .*no group was changed"):
        fl.optim.apply(StepDecay(0.5, 1, 1.0), opt, 0)
    assert [g["lr"] for g in opt.param_groups] == [0.3, 0.7]


def test_scheduled_lr_state_round_trip_resumes_the_curve():
    sched = CosineScheduler(0.1, 0.0, 30)
    opt = sgd()
    bridge = ScheduledLR(opt, sched)
    for _ in range(7):
        opt.step()
        bridge.step()
    state = bridge.state_dict()
    assert "scheduler" not in state and state["last_epoch"] == 7
    torch.save(state, "/dev/null")  # plain data: serialisable
    opt2 = sgd()
    resumed = ScheduledLR(opt2, sched)
    resumed.load_state_dict(state)
    opt2.step()
    resumed.step()
    assert opt2.param_groups[0]["lr"] == sched.lr(8)


def test_scheduled_lr_refuses_the_state_of_another_schedule_and_changes_nothing():
    opt = sgd()
    bridge = ScheduledLR(opt, StepDecay(0.1, 2, 0.5))
    for _ in range(5):
        opt.step()
        bridge.step()
    state = bridge.state_dict()
    assert state["schedule"] == "StepDecay(base_lr=0.1, step_size=2, gamma=0.5)"
    opt2 = sgd()
    other = ScheduledLR(opt2, StepDecay(0.5, 10, 0.1))
    expected = (
        r"saved following StepDecay\(base_lr=0\.1, step_size=2, gamma=0\.5\), but this "
        r"ScheduledLR follows StepDecay\(base_lr=0\.5, step_size=10, gamma=0\.1\) — build it "
        "with the same schedule"
    )
    with pytest.raises(OptimError, match=expected):
        other.load_state_dict(state)
    assert other.last_epoch == 0 and opt2.param_groups[0]["lr"] == 0.5  # nothing changed
    same = ScheduledLR(sgd(), StepDecay(0.1, 2, 0.5))  # an equal schedule, another object
    same.load_state_dict(state)
    assert same.last_epoch == 5


def test_scheduled_lr_with_plateau_carries_its_state():
    plateau = PlateauScheduler(0.1, 1, 0.5, 0.0)
    opt = sgd()
    bridge = ScheduledLR(opt, plateau)
    plateau.observe(1.0)
    plateau.observe(2.0)
    opt.step()
    bridge.step()
    assert opt.param_groups[0]["lr"] == 0.05
    fresh = PlateauScheduler(0.1, 1, 0.5, 0.0)
    other = ScheduledLR(sgd(), fresh)
    other.load_state_dict(bridge.state_dict())
    assert fresh.lr() == 0.05 and fresh.best == 1.0


def test_scheduled_lr_rejects_what_is_not_a_scheduler():
    with pytest.raises(OptimError, match=r"\.lr\(step\)"):
        ScheduledLR(sgd(), 0.1)


def test_set_lr_and_set_group_lr():
    a, b = torch.zeros(1, requires_grad=True), torch.zeros(1, requires_grad=True)
    opt = sgd({"params": [a]}, {"params": [b], "lr": 0.5})
    fl.optim.set_lr(opt, 1e-3)
    assert [g["lr"] for g in opt.param_groups] == [1e-3, 1e-3]
    fl.optim.set_group_lr(opt, 1, 1e-5)
    assert [fl.optim.get_lr(opt, i) for i in (0, 1)] == [1e-3, 1e-5]


def test_set_group_lr_out_of_range_says_how_many_groups_exist():
    with pytest.raises(OptimError, match=r"param group 3 does not exist: .* 1 group\(s\)"):
        fl.optim.set_group_lr(sgd(), 3, 0.1)
    with pytest.raises(OptimError, match="does not exist"):
        fl.optim.get_lr(sgd(), 2)


@pytest.mark.parametrize("bad", [-0.1, float("nan")])
def test_set_lr_rejects_negative_and_nan(bad):
    opt = sgd()
    with pytest.raises(OptimError, match="learning rate"):
        fl.optim.set_lr(opt, bad)
    assert opt.param_groups[0]["lr"] == 1.0  # nothing changed


def test_set_lr_needs_the_optimizer_not_the_parameters():
    with pytest.raises(OptimError, match="pass the optimizer"):
        fl.optim.set_lr([torch.zeros(1)], 0.1)


def test_tensor_lr_is_updated_in_place():
    lr = torch.tensor(0.01)
    opt = torch.optim.Adam([torch.zeros(2, requires_grad=True)], lr=lr, foreach=False)
    held = opt.param_groups[0]["lr"]
    fl.optim.set_lr(opt, 0.5)
    assert opt.param_groups[0]["lr"] is held and held.item() == 0.5
    fl.optim.apply(StepDecay(0.25, 1, 1.0), opt, 0)
    assert held.item() == 0.25
