"""fl.save_training_state / fl.load_training_state: all-or-nothing loads, every kind of scheduler,
and a data Rng."""

from __future__ import annotations

import io
import logging
import random

import numpy as np
import pytest
import torch
from torch import nn
from torch.optim import lr_scheduler as lrs

import flodl as fl
from flodl.checkpoint import training


def make_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.2), nn.ReLU(), nn.Linear(8, 1))


def train_step(model: nn.Module, opt: torch.optim.Optimizer, step: int) -> None:
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(step))
    loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def trained(steps: int = 2):
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for step in range(steps):
        train_step(model, opt, step)
        sched.step()
    return model, opt, sched


def saved(*args, **kwargs) -> io.BytesIO:
    buf = io.BytesIO()
    fl.save_training_state(buf, *args, **kwargs)
    buf.seek(0)
    return buf


# ------------------------------------------------------------------ all-or-nothing


def frozen(value):
    """A deep, comparable copy: tensors cloned, containers rebuilt."""
    if isinstance(value, torch.Tensor):
        return ("tensor", value.dtype, tuple(value.shape), value.detach().clone())
    if isinstance(value, dict):
        return {k: frozen(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(frozen(v) for v in value)
    if isinstance(value, np.ndarray):
        return ("array", value.tolist())
    return value


def same(a, b) -> bool:
    if isinstance(a, tuple) and a[:1] == ("tensor",):
        return isinstance(b, tuple) and a[1:3] == b[1:3] and torch.equal(a[3], b[3])
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    return a == b


class Live:
    """The objects a resume touches, fresh, with a snapshot of everything a load may change."""

    def __init__(self, scheduler=True):
        self.model = make_model(seed=5)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=0.3)
        train_step(self.model, self.opt, 9)  # non-trivial optimizer state to protect
        self.sched = torch.optim.lr_scheduler.StepLR(self.opt, step_size=3) if scheduler else None
        self.data_rng = fl.Rng(77)
        self.data_rng.u64()
        random.seed(123)
        np.random.seed(123)
        torch.manual_seed(123)

    def snapshot(self):
        return frozen(
            {
                "model": self.model.state_dict(),
                "opt": self.opt.state_dict(),
                "sched": self.sched.state_dict() if self.sched else None,
                "data_rng": self.data_rng.state_dict(),
                "torch": torch.get_rng_state(),
                "python": random.getstate(),
                "numpy": np.random.get_state(),
            }
        )

    def load(self, src, **kwargs):
        return fl.load_training_state(
            src, self.model, self.opt, self.sched, data_rng=self.data_rng, **kwargs
        )


GOOD_RNG_STATE = training._rng_state  # the real one: tests patch the module attribute


def with_rng(change):
    state = GOOD_RNG_STATE()
    change(state)
    return state


def short_numpy_keys(state):
    name, keys, pos, has_gauss, gauss = state["numpy"]
    state["numpy"] = (name, keys[:10], pos, has_gauss, gauss)


def numpy_position(state):
    name, keys, _, has_gauss, gauss = state["numpy"]
    state["numpy"] = (name, keys, 9999, has_gauss, gauss)


def negative_numpy_key(state):
    name, keys, pos, has_gauss, gauss = state["numpy"]
    keys = keys.clone()
    keys[0] = -5
    state["numpy"] = (name, keys, pos, has_gauss, gauss)


BAD_RNG = {
    "torch state of the wrong size": lambda s: s.update(torch=torch.zeros(100, dtype=torch.uint8)),
    "torch state of the wrong dtype": lambda s: s.update(torch=s["torch"].to(torch.int64)),
    "torch state that is not an mt19937 state": lambda s: s.update(
        torch=torch.zeros_like(s["torch"])
    ),
    "torch state reshaped": lambda s: s.update(torch=s["torch"].reshape(2, -1)),
    "short numpy keys": short_numpy_keys,
    "numpy position out of range": numpy_position,
    "numpy key outside 32 bits": negative_numpy_key,
    "python state": lambda s: s.update(python=(3, (1, 2, 3), None)),
    "cuda state": lambda s: s.update(cuda=["not a tensor"]),
}


@pytest.mark.parametrize("case", list(BAD_RNG))
def test_a_malformed_rng_state_changes_nothing(case, monkeypatch):
    """Regression: a wrong-sized torch RNG state (or short numpy keys) raised RuntimeError /
    IndexError after the model, optimizer and scheduler had already been overwritten."""
    model, opt, sched = trained()
    monkeypatch.setattr(training, "_rng_state", lambda: with_rng(BAD_RNG[case]))
    src = saved(model, opt, sched, step=2, data_rng=fl.Rng(1))
    monkeypatch.undo()
    live = Live()
    before = live.snapshot()
    with pytest.raises(fl.CheckpointError, match="stored RNG state is malformed") as info:
        live.load(src)
    assert "restore_rng=False" in str(info.value)
    assert same(before, live.snapshot())
    src.seek(0)
    live.load(src, restore_rng=False)  # the rest of the file is fine
    assert torch.equal(live.model[0].weight, model[0].weight)


class LoggedStepLR(torch.optim.lr_scheduler.StepLR):
    """Saves as a StepLR whose state has one learning rate too many (a two-group optimizer's)."""

    def state_dict(self):
        state = super().state_dict()
        state["base_lrs"] = [*state["base_lrs"], 0.5]
        return state


LoggedStepLR.__name__ = LoggedStepLR.__qualname__ = "StepLR"


def wrong_data_rng_state(monkeypatch):
    good = fl.Rng.state_dict

    def bad(self):
        return {**good(self), "buffer": [1 << 64]}

    monkeypatch.setattr(fl.Rng, "state_dict", bad)


def wider_model():
    return (nn.Sequential(nn.Linear(4, 9), nn.Dropout(), nn.ReLU(), nn.Linear(9, 1)),)


def sgd_instead_of_adam():
    model = make_model()
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def scheduler_state_for_two_groups():
    model = make_model()
    opt = torch.optim.Adam(model.parameters())
    return model, opt, LoggedStepLR(opt, step_size=2)


MALFORMED = {
    "model shape": (wider_model, 'parameter "0.weight": shape mismatch'),
    "optimizer class": (sgd_instead_of_adam, "holds SGD state but the optimizer is Adam"),
    "scheduler state": (
        scheduler_state_for_two_groups,
        r"does not fit StepLR: the state\['base_lrs'\] has 2 items in the file, 1 in the scheduler",
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_part_that_does_not_fit_changes_nothing(case):
    build, message = MALFORMED[case]
    src = saved(*build(), step=1, data_rng=fl.Rng(1))
    live = Live()
    before = live.snapshot()
    with pytest.raises(fl.CheckpointError, match=message):
        live.load(src, strict_hash=False)
    assert same(before, live.snapshot())


def test_a_malformed_data_rng_changes_nothing(monkeypatch):
    model, opt, sched = trained()
    wrong_data_rng_state(monkeypatch)
    src = saved(model, opt, sched, step=2, data_rng=fl.Rng(1))
    monkeypatch.undo()
    live = Live()
    before = live.snapshot()
    with pytest.raises(fl.CheckpointError, match="stored data Rng state is malformed"):
        live.load(src)
    assert same(before, live.snapshot())


class FailingScheduler:
    """Stateful, structurally fine, but its load_state_dict fails (after the optimizer's load)."""

    def __init__(self):
        self.position = 0

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        raise RuntimeError("disk on fire")


def test_a_failure_while_applying_puts_back_what_was_applied():
    model, opt, _ = trained()
    src = saved(model, opt, FailingScheduler(), step=2)
    live = Live(scheduler=False)
    live.sched = None
    before = live.snapshot()
    with pytest.raises(
        fl.CheckpointError, match=r"RuntimeError: disk on fire.*nothing was changed"
    ):
        fl.load_training_state(src, live.model, live.opt, FailingScheduler())
    assert same(before, live.snapshot())


# ------------------------------------------------------------------ schedulers


def run(model, opt, sched, steps) -> list[float]:
    lrs = []
    for step in steps:
        lrs.append(fl.optim.apply(sched, opt, step))
        train_step(model, opt, step)
    return lrs


PURE = {
    "cosine": lambda: fl.optim.CosineScheduler(0.05, 1e-4, total_steps=8),
    "warmup": lambda: fl.optim.WarmupScheduler(fl.optim.CosineScheduler(0.05, 1e-4, 6), 0.05, 2),
    "one-cycle": lambda: fl.optim.OneCycleLR(0.05, total_steps=8),
}


@pytest.mark.parametrize("kind", list(PURE))
def test_resuming_with_a_pure_scheduler_is_identical_to_not_stopping(kind):
    """Regression: save_training_state(..., fl.optim.CosineScheduler(...)) raised AttributeError."""
    reference = make_model()
    ref_opt = fl.optim.Adam(reference.parameters(), lr=1.0)
    ref_lrs = run(reference, ref_opt, PURE[kind](), range(8))

    model = make_model()
    opt = fl.optim.Adam(model.parameters(), lr=1.0)
    sched = PURE[kind]()
    lrs = run(model, opt, sched, range(5))
    src = saved(model, opt, sched, step=5)

    fresh = make_model(seed=3)
    fresh_opt = fl.optim.Adam(fresh.parameters(), lr=1.0)
    fresh_sched = PURE[kind]()
    state = fl.load_training_state(src, fresh, fresh_opt, fresh_sched)
    assert state.step == 5
    lrs += run(fresh, fresh_opt, fresh_sched, range(state.step, 8))
    assert lrs == ref_lrs
    for a, b in zip(reference.parameters(), fresh.parameters(), strict=True):
        assert torch.equal(a, b)


def test_a_pure_scheduler_needs_the_step_to_be_saved(tmp_path):
    model = make_model()
    with pytest.raises(fl.CheckpointError, match=r"pure function of the step.*pass step="):
        fl.save_training_state(tmp_path / "run.fdl", model, None, fl.optim.StepDecay(0.1, 2, 0.5))
    assert not list(tmp_path.iterdir())


def test_resuming_with_another_schedule_is_refused():
    model = make_model()
    src = saved(model, None, fl.optim.CosineScheduler(0.1, 0.0, 100), step=10)
    fresh = make_model(seed=1)
    before = frozen(fresh.state_dict())
    with pytest.raises(
        fl.CheckpointError,
        match=r"holds the pure scheduler CosineScheduler\(base_lr=0.1, .*total_steps=100\), "
        r"but the scheduler passed is CosineScheduler\(.*total_steps=200\).*scheduler=None",
    ):
        fl.load_training_state(src, fresh, None, fl.optim.CosineScheduler(0.1, 0.0, 200))
    assert same(before, frozen(fresh.state_dict()))
    src.seek(0)
    assert fl.load_training_state(src, fresh).step == 10  # scheduler=None: the caller decides


def test_a_pure_scheduler_and_a_stateful_one_are_not_interchangeable():
    model, opt, sched = trained()
    src = saved(model, opt, sched, step=2)
    with pytest.raises(fl.CheckpointError, match="holds StepLR's state, but the scheduler passed"):
        fl.load_training_state(src, model, opt, fl.optim.StepDecay(0.1, 2, 0.5))
    src = saved(model, opt, fl.optim.StepDecay(0.1, 2, 0.5), step=2)
    with pytest.raises(
        fl.CheckpointError, match=r"holds the pure scheduler StepDecay\(.*not state"
    ):
        fl.load_training_state(src, model, opt, sched)


def test_a_plateau_scheduler_resumes_its_state():
    plateau = fl.optim.PlateauScheduler(0.1, patience=2, factor=0.5, min_lr=1e-4)
    for metric in (1.0, 0.9, 0.95, 0.97, 0.99):
        plateau.observe(metric)
    src = saved(make_model(), None, plateau, epoch=5)
    fresh = fl.optim.PlateauScheduler(0.1, patience=2, factor=0.5, min_lr=1e-4)
    fl.load_training_state(src, make_model(), None, fresh)
    assert fresh.state_dict() == plateau.state_dict()
    assert [fresh.observe(m) for m in (1.0, 1.0, 0.1)] == [
        plateau.observe(m) for m in (1.0, 1.0, 0.1)
    ]


def test_something_that_is_no_scheduler_is_refused_at_save(tmp_path):
    with pytest.raises(fl.CheckpointError, match="cannot save a str as a scheduler"):
        fl.save_training_state(tmp_path / "run.fdl", make_model(), None, "cosine", step=1)
    with pytest.raises(fl.CheckpointError, match="step must be an integer"):
        fl.save_training_state(tmp_path / "run.fdl", make_model(), step=1.5)
    assert not list(tmp_path.iterdir())


def test_the_data_rng_continues_where_it_was():
    rng = fl.Rng(3)
    rng.permutation(10)
    src = saved(make_model(), data_rng=rng, rng=False)
    fresh = fl.Rng(99)
    fl.load_training_state(src, make_model(), data_rng=fresh, restore_rng=False)
    assert [fresh.permutation(10) for _ in range(30)] == [rng.permutation(10) for _ in range(30)]
    src = saved(make_model(), rng=False)
    with pytest.raises(fl.CheckpointError, match="holds no data Rng"):
        fl.load_training_state(src, make_model(), data_rng=fresh, restore_rng=False)


TORCH_SCHEDULERS = {
    "StepLR": lambda o: lrs.StepLR(o, 2),
    "MultiStepLR": lambda o: lrs.MultiStepLR(o, [2, 4, 4]),  # milestones are a Counter
    "LambdaLR": lambda o: lrs.LambdaLR(o, lambda e: 0.9**e),
    "OneCycleLR": lambda o: lrs.OneCycleLR(o, 1.0, total_steps=20),
    "CosineAnnealingWarmRestarts": lambda o: lrs.CosineAnnealingWarmRestarts(o, 3),
    "ReduceLROnPlateau": lambda o: lrs.ReduceLROnPlateau(o),
    "CyclicLR": lambda o: lrs.CyclicLR(o, 0.01, 0.1, 3),
    "SequentialLR": lambda o: lrs.SequentialLR(
        o, [lrs.LinearLR(o, 0.1, total_iters=2), lrs.ExponentialLR(o, 0.9)], [2]
    ),
    "ScheduledLR": lambda o: fl.optim.ScheduledLR(o, fl.optim.CosineScheduler(0.1, 0.0, 10)),
}


@pytest.mark.parametrize("name", list(TORCH_SCHEDULERS))
def test_torch_schedulers_resume_with_their_exact_state(name):
    def setup():
        model = make_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        return model, opt, TORCH_SCHEDULERS[name](opt)

    model, opt, sched = setup()
    for step in range(3):
        train_step(model, opt, step)
        sched.step(1.0) if name == "ReduceLROnPlateau" else sched.step()
    src = saved(model, opt, sched, step=3)
    model2, opt2, sched2 = setup()
    fl.load_training_state(src, model2, opt2, sched2)
    assert repr(sched2.state_dict()) == repr(sched.state_dict())  # types included (Counter)
    assert [g["lr"] for g in opt2.param_groups] == [g["lr"] for g in opt.param_groups]


# ------------------------------------------------------------------ the wrong loader


@pytest.mark.parametrize("how", ["function", "graph", "graph-of-another-architecture"])
def test_loading_a_training_state_as_a_checkpoint_names_the_loader_to_use(tmp_path, how):
    def graph(width: int = 8) -> fl.Graph:
        return (
            fl.FlowBuilder(nn.Linear(4, width))
            .through(nn.Tanh())
            .through(nn.Linear(width, 1))
            .build()
        )

    path = tmp_path / "run.fdl"
    model = make_model() if how == "function" else graph()
    fl.save_training_state(path, model, torch.optim.Adam(model.parameters()), epoch=1, step=3)
    expected = (
        r"run\.fdl: this file is a training state \(written by fl\.save_training_state\), not a "
        r"model checkpoint: load it with fl\.load_training_state\(path, model, optimizer, \.\.\.\)"
    )
    with pytest.raises(fl.CheckpointError, match=expected) as err:
        if how == "function":
            fl.load_checkpoint(path, make_model().named_parameters(), make_model().named_buffers())
        else:
            (graph(16) if how.endswith("architecture") else graph()).load_checkpoint(path)
    assert "Rust" not in str(err.value) and "migrate" not in str(err.value)

    opt_path = tmp_path / "opt.fdl"
    fl.save_optimizer_state(torch.optim.SGD(model.parameters(), lr=0.1), opt_path)
    with pytest.raises(fl.CheckpointError, match=r"fl\.load_optimizer_state\(optimizer, path\)"):
        fl.load_checkpoint(opt_path, make_model().named_parameters())


def test_a_scheduled_lr_on_another_schedule_is_refused_like_a_pure_one():
    def setup(schedule):
        model = make_model()
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        return model, opt, fl.optim.ScheduledLR(opt, schedule)

    model, opt, sched = setup(fl.optim.StepDecay(0.1, step_size=2, gamma=0.5))
    for step in range(5):
        train_step(model, opt, step)
        sched.step()
    src = saved(model, opt, sched)
    model2, opt2, sched2 = setup(fl.optim.StepDecay(0.5, step_size=10, gamma=0.1))
    before = frozen({"opt": opt2.state_dict(), "sched": sched2.state_dict()})
    expected = (
        r"the file holds ScheduledLR state following StepDecay\(base_lr=0\.1, step_size=2, "
        r"gamma=0\.5\), but the ScheduledLR passed follows StepDecay\(base_lr=0\.5, "
        r"step_size=10, gamma=0\.1\) — pass the same schedule .* or scheduler=None"
    )
    with pytest.raises(fl.CheckpointError, match=expected):
        fl.load_training_state(src, model2, opt2, sched2)
    assert same(frozen({"opt": opt2.state_dict(), "sched": sched2.state_dict()}), before)
    src.seek(0)
    model3, opt3, sched3 = setup(fl.optim.StepDecay(0.1, step_size=2, gamma=0.5))
    fl.load_training_state(src, model3, opt3, sched3)  # the same schedule resumes
    assert sched3.get_last_lr() == sched.get_last_lr() == [0.025]


def test_a_partial_training_state_load_logs_a_warning(caplog):
    model, opt, _ = trained()
    src = saved(model, opt, epoch=1, step=2)
    bigger = nn.Sequential(*make_model(), nn.Linear(1, 1))  # a layer the file does not have
    with caplog.at_level(logging.WARNING, logger="flodl.checkpoint"):
        state = fl.load_training_state(src, bigger)
    assert state.report.missing == ["4.weight", "4.bias"]
    warned = [r.getMessage() for r in caplog.records if r.name == "flodl.checkpoint"]
    assert warned == [
        "<stream>: partial load, 4 of 6 model entries loaded — not in the file (they keep their "
        "values): '4.weight', '4.bias' (2 entries)"
    ]
    caplog.clear()
    src.seek(0)
    same = make_model()
    with caplog.at_level(logging.WARNING, logger="flodl.checkpoint"):
        fl.load_training_state(src, same, torch.optim.Adam(same.parameters(), lr=1e-2))
    assert [r for r in caplog.records if r.name == "flodl.checkpoint"] == []  # complete: silent
