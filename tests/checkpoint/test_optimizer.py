"""Optimizer state and full training state: resuming gives bit-identical training."""

from __future__ import annotations

import io
import random

import numpy as np
import pytest
import torch
from torch import nn

import flodl as fl

OPTIMIZERS = {
    "SGD": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
    "Adam": lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True),
    "AdamW": lambda p: torch.optim.AdamW(p, lr=1e-2, betas=(0.8, 0.95)),
    "RMSprop": lambda p: torch.optim.RMSprop(p, lr=1e-2, momentum=0.5, centered=True),
    "Adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1),
    "RAdam": lambda p: torch.optim.RAdam(p, lr=1e-2),
    "NAdam": lambda p: torch.optim.NAdam(p, lr=1e-2),
}


def make_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.2), nn.ReLU(), nn.Linear(8, 1))


def train(model, opt, steps: int, scheduler=None) -> None:
    g = torch.Generator().manual_seed(steps)
    for _ in range(steps):
        x = torch.randn(16, 4, generator=g)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if scheduler is not None:
            scheduler.step()


def params_of(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_resuming_from_saved_model_and_optimizer_is_identical(name, tmp_path):
    model = make_model()
    opt = OPTIMIZERS[name](model.parameters())
    train(model, opt, 3)
    fl.save_checkpoint(tmp_path / "m.fdl", model.named_parameters())
    fl.save_optimizer_state(opt, tmp_path / "o.fdl")
    torch.manual_seed(42)
    train(model, opt, 3)
    expected = params_of(model)

    fresh = make_model(seed=7)
    fresh_opt = OPTIMIZERS[name](fresh.parameters())
    fl.load_checkpoint(tmp_path / "m.fdl", fresh.named_parameters())
    fl.load_optimizer_state(fresh_opt, tmp_path / "o.fdl")
    torch.manual_seed(42)
    train(fresh, fresh_opt, 3)
    assert all(torch.equal(a, b) for a, b in zip(expected, params_of(fresh), strict=True))


def test_optimizer_file_is_a_plain_fdl_file():
    model = make_model()
    opt = torch.optim.Adam(model.parameters())
    train(model, opt, 1)
    buf = io.BytesIO()
    fl.save_optimizer_state(opt, buf)
    buf.seek(0)
    keys = fl.checkpoint_keys(buf)
    assert keys[0] == "optimizer.json" and "optimizer/state/0/exp_avg" in keys


def saved_state(opt) -> io.BytesIO:
    buf = io.BytesIO()
    fl.save_optimizer_state(opt, buf)
    buf.seek(0)
    return buf


def test_wrong_optimizer_class_or_model_is_refused_and_changes_nothing():
    model = make_model()
    adam = torch.optim.Adam(model.parameters(), lr=0.5)
    train(model, adam, 1)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(fl.CheckpointError, match="holds Adam state but the optimizer is SGD"):
        fl.load_optimizer_state(sgd, saved_state(adam))
    other = torch.optim.Adam(nn.Linear(2, 2).parameters(), lr=0.3)
    with pytest.raises(fl.CheckpointError, match="param count mismatch: checkpoint=4"):
        fl.load_optimizer_state(other, saved_state(adam))
    assert other.param_groups[0]["lr"] == 0.3 and not other.state


def test_state_with_a_wrong_shape_is_refused():
    a = nn.Linear(4, 8)
    opt = torch.optim.Adam(a.parameters())
    a(torch.randn(2, 4)).sum().backward()
    opt.step()
    b = nn.Linear(8, 4)  # same parameter count, other shapes
    with pytest.raises(fl.CheckpointError, match="state 'exp_avg' of parameter 0 has shape"):
        fl.load_optimizer_state(torch.optim.Adam(b.parameters()), saved_state(opt))


def test_state_the_optimizer_fails_on_after_installing_it_changes_nothing():
    """Found by fuzzing: torch's Adam.__setstate__ reads every "step" after load_state_dict has
    installed the new state, so a state without one failed half-way through the load."""
    model = make_model()
    adam = torch.optim.Adam(model.parameters(), lr=0.5)
    train(model, adam, 1)
    buf = io.BytesIO()
    fl.save_optimizer_state(adam, buf, checksum=False)
    data = buf.getvalue()
    assert data.count(b'["step",') == 4
    broken = io.BytesIO(data.replace(b'["step",', b'["st p",'))
    live = torch.optim.Adam(model.parameters(), lr=0.1)
    train(model, live, 2)
    state, groups = live.state, live.param_groups
    before = repr(live.state_dict())
    with pytest.raises(
        fl.CheckpointError, match=r"the optimizer rejected the stored state.*unchanged"
    ):
        fl.load_optimizer_state(live, broken)
    assert live.state is state and live.param_groups is groups and repr(live.state_dict()) == before


def test_a_model_checkpoint_is_not_an_optimizer_state():
    buf = io.BytesIO()
    fl.save_checkpoint(buf, {"w": torch.ones(1)})
    buf.seek(0)
    with pytest.raises(fl.CheckpointError, match="not an optimizer state file"):
        fl.load_optimizer_state(torch.optim.SGD([nn.Parameter(torch.ones(1))]), buf)


def test_training_state_resumes_model_optimizer_scheduler_and_rng(tmp_path):
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    train(model, opt, 3, sched)
    random.seed(5)
    np.random.seed(5)
    fl.save_training_state(
        tmp_path / "run.fdl", model, opt, sched, epoch=3, step=30, extra={"best": 0.25, "tag": "a"}
    )
    # The reference continuation uses the RNG state as it was at save time (dropout draws from it).
    train(model, opt, 3, sched)
    expected = (params_of(model), random.random(), np.random.rand(), sched.last_epoch)

    torch.manual_seed(99)
    random.seed(99)
    fresh = make_model(seed=3)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1.0)
    fresh_sched = torch.optim.lr_scheduler.StepLR(fresh_opt, step_size=2, gamma=0.5)
    state = fl.load_training_state(tmp_path / "run.fdl", fresh, fresh_opt, fresh_sched)
    assert (state.epoch, state.step, state.extra) == (3, 30, {"best": 0.25, "tag": "a"})
    assert state.report.complete and state.report.loaded[0] == "0.weight"
    train(fresh, fresh_opt, 3, fresh_sched)
    got = (params_of(fresh), random.random(), np.random.rand(), fresh_sched.last_epoch)
    assert all(torch.equal(a, b) for a, b in zip(expected[0], got[0], strict=True))
    assert expected[1:] == got[1:]


def test_training_state_load_is_all_or_nothing(tmp_path):
    model = make_model()
    opt = torch.optim.Adam(model.parameters())
    train(model, opt, 1)
    fl.save_training_state(tmp_path / "run.fdl", model, opt)
    fresh = make_model(seed=4)
    before = params_of(fresh)
    wrong_opt = torch.optim.SGD(fresh.parameters(), lr=0.1)
    with pytest.raises(fl.CheckpointError, match="holds Adam state"):
        fl.load_training_state(tmp_path / "run.fdl", fresh, wrong_opt)
    assert all(torch.equal(a, b) for a, b in zip(before, params_of(fresh), strict=True))


def test_unsupported_extra_values_are_refused_without_pickle(tmp_path):
    with pytest.raises(fl.CheckpointError, match="cannot store a set at extra"):
        fl.save_training_state(tmp_path / "run.fdl", make_model(), extra={1, 2})
    assert not list(tmp_path.iterdir())


def test_scheduler_state_must_fit_the_scheduler(tmp_path):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = torch.optim.lr_scheduler.StepLR(opt, step_size=2)
    fl.save_training_state(tmp_path / "run.fdl", model, opt, step)
    fresh = make_model(seed=2)
    before = params_of(fresh)
    fresh_opt = torch.optim.SGD(fresh.parameters(), lr=0.1)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(fresh_opt, T_max=10)
    with pytest.raises(fl.CheckpointError, match="does not fit CosineAnnealingLR"):
        fl.load_training_state(tmp_path / "run.fdl", fresh, fresh_opt, cosine)
    assert all(torch.equal(a, b) for a, b in zip(before, params_of(fresh), strict=True))
