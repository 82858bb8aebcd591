"""One configuration: every Builder setter, DdpConfig field and factory is checked the same way,
at once, with a TrainerConfigError naming the knob; each El Che default is defined once."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import flodl as fl
from flodl.train import config
from flodl.train.config import ElCheConfig
from flodl.train.el_che import ElChe
from flodl.train.errors import TrainerConfigError
from flodl.train.train_spec import TrainSpec
from tests.train import toy

INTEGER_SETTERS = ["batch_size", "num_epochs", "anchor", "max_anchor", "checkpoint_every"]
INTEGER_SETTERS += ["threads_per_rank"]
NOT_INTEGERS = [2.7, "abc", None, True, "3", 3.0, [3]]


def builder():
    return fl.Trainer.builder(toy.make_model, toy.make_sgd, toy.mse_step)


@pytest.mark.parametrize("setter", INTEGER_SETTERS)
@pytest.mark.parametrize("value", NOT_INTEGERS, ids=repr)
def test_integer_setters_reject_what_is_not_an_integer_naming_the_knob(setter, value):
    b = builder()
    before = dataclasses.replace(b.spec)
    with pytest.raises(TrainerConfigError, match=rf"^{setter} must be an integer >= 1, got "):
        getattr(b, setter)(value)
    assert b.spec == before  # nothing half-set


@pytest.mark.parametrize("setter", INTEGER_SETTERS)
def test_integer_setters_take_ints_and_integer_like_values(setter):
    b = getattr(builder(), setter)(torch.tensor(3).item())
    spec = b.spec
    stored = getattr(spec.el_che, setter) if setter in ("anchor", "max_anchor") else None
    assert (stored if stored is not None else getattr(spec, setter)) == 3


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda b: b.overhead_target(math.inf), "overhead_target must be a finite number > 0"),
        (lambda b: b.overhead_target("0.1"), "overhead_target must be a finite number > 0"),
        (lambda b: b.speed_hint("a", "b"), "speed_hint slow_rank must be an integer >= 0"),
        (lambda b: b.speed_hint(1, True), "speed_hint ratio must be a finite number > 0"),
        (lambda b: b.max_batch_diff(True), "max_batch_diff must be an integer >= 0"),
        (lambda b: b.seed(1.5), "seed must be an integer"),
        (lambda b: b.timeout(None), "timeout must be a finite number > 0"),
        (lambda b: b.lr_scale_ratio(math.nan), "lr_scale_ratio must be a finite number >= 0"),
        (lambda b: b.progressive_dispatch("no"), "progressive_dispatch must be True or False"),
        (lambda b: b.policy("fast"), "policy must be one of ApplyPolicy.SYNC"),
        (lambda b: b.backend(3), "backend must be one of AverageBackend."),
        (lambda b: b.devices("cpu"), "devices: give a list of at least one device"),
        (lambda b: b.partition_ratios(0.5), "partition_ratios must be a list of numbers"),
        (lambda b: b.epoch_fn(3), "epoch_fn must be a function (epoch, worker) -> None"),
        (lambda b: b.metrics_fn("log"), "metrics_fn must be a function"),
        (lambda b: b.checkpoint_every(2, "ckpt"), "checkpoint_fn must be a function"),
        (lambda b: b.scheduler(0.1), "scheduler must be a function world_size -> scheduler"),
    ],
)
def test_builder_setters_reject_bad_values_naming_the_knob(call, message):
    with pytest.raises(
        TrainerConfigError, match="^" + message.replace("(", r"\(").replace(")", r"\)")
    ):
        call(builder())


def test_a_scheduler_instance_where_a_factory_is_expected_is_refused_with_the_fix():
    with pytest.raises(TrainerConfigError) as info:
        builder().scheduler(fl.optim.CosineScheduler(0.1, 0.001, total_steps=100))
    message = str(info.value)
    assert "takes a factory world_size -> scheduler" in message
    assert "got a CosineScheduler instance" in message
    assert "def make(world): return CosineScheduler(...)" in message
    builder().scheduler(toy.half_schedule)  # a factory is fine
    builder().scheduler(toy.DropSchedule)  # so is a class (building the scheduler)


def test_a_factory_returning_a_number_fails_run_before_training():
    b = builder().dataset(toy.regression_data(64)).batch_size(16).num_epochs(1)
    with pytest.raises(
        TrainerConfigError, match=r"the factory returned float 0\.5, not a scheduler"
    ):
        b.scheduler(toy.half).run()


@pytest.mark.parametrize(
    ("model", "optim", "message"),
    [
        (lambda device: 3, toy.make_sgd, "model_factory must return a torch.nn.Module, got int"),
        (
            toy.make_model,
            lambda params: "sgd",
            "optim_factory must return a torch.optim.Optimizer, got str",
        ),
    ],
    ids=["model", "optimizer"],
)
def test_a_factory_returning_the_wrong_kind_fails_run_saying_which(model, optim, message):
    b = fl.Trainer.builder(model, optim, toy.mse_step).dataset(toy.regression_data(64))
    with pytest.raises(TrainerConfigError, match=message):
        b.batch_size(16).num_epochs(1).run().join()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("model_factory", None, "model_factory must be a function device -> nn.Module"),
        ("optim_factory", "sgd", "optim_factory must be a function params -> Optimizer"),
        ("train_step", 1, "train_step must be a function (model, batch) -> loss"),
    ],
)
def test_builder_factories_must_be_callable(field, value, message):
    args = {"model_factory": toy.make_model, "optim_factory": toy.make_sgd}
    args["train_step"] = toy.mse_step
    args[field] = value
    with pytest.raises(
        TrainerConfigError, match=r"^" + message.replace("(", r"\(").replace(")", r"\)")
    ):
        fl.Trainer.builder(args["model_factory"], args["optim_factory"], args["train_step"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"overhead_target": math.inf}, "overhead_target must be a finite number > 0, got inf"),
        ({"speed_hint": ("a", "b")}, "speed_hint slow_rank must be an integer >= 0, got 'a'"),
        ({"speed_hint": (1, "b")}, "speed_hint ratio must be a finite number > 0, got 'b'"),
        ({"speed_hint": (1, 2.0, 3)}, "speed_hint must be (slow_rank, ratio)"),
        ({"max_anchor": True}, "max_anchor must be an integer >= 0, got True"),
        ({"max_anchor": 2.5}, "max_anchor must be an integer >= 0, got 2.5"),
        ({"anchor": 0}, "anchor must be an integer >= 1, got 0"),
        ({"max_batch_diff": -1}, "max_batch_diff must be an integer >= 0, got -1"),
        ({"max_grad_norm": "1"}, "max_grad_norm must be a finite number > 0, got '1'"),
        ({"average": None}, "average must be one of 'params', 'grads'"),
    ],
)
def test_ddp_config_fields_are_checked_like_the_builder_setters(kwargs, message):
    with pytest.raises(TrainerConfigError) as info:
        fl.DdpConfig(**kwargs)
    assert str(info.value).startswith(message)


def test_configs_are_immutable_and_normalised():
    cfg = fl.DdpConfig(speed_hint=[1, 2])
    assert cfg.speed_hint == (1, 2.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.max_anchor = 5  # type: ignore[misc]
    assert isinstance(cfg, ElCheConfig)


def test_each_el_che_default_is_defined_once():
    builder_knobs = TrainSpec(toy.make_model, toy.make_sgd, toy.mse_step).el_che
    graph_knobs = fl.DdpConfig()
    el = ElChe(2)
    for knobs in (builder_knobs, graph_knobs):
        assert (knobs.anchor, knobs.max_anchor, knobs.overhead_target) == (
            config.ANCHOR,
            config.MAX_ANCHOR,
            config.OVERHEAD_TARGET,
        )
    assert (el.anchor, el.max_anchor, el.overhead_target) == (10, 200, 0.10)
    assert TrainSpec(toy.make_model, toy.make_sgd, toy.mse_step).timeout == config.TIMEOUT == 60
    # Builder and Graph mode build the same El Che from the same knobs.
    b = builder().anchor(4).max_anchor(50).overhead_target(0.2).speed_hint(1, 2.0)
    same = fl.DdpConfig(anchor=4, max_anchor=50, overhead_target=0.2, speed_hint=(1, 2.0))
    assert b.spec.el_che.build(2).batch_counts == same.el_che(2).batch_counts == [8, 4]


def test_trainer_setup_checks_timeout_like_the_builder():
    model = fl.FlowBuilder(toy.make_model("cpu")).build()
    for bad in (0, math.inf, "60", None):
        with pytest.raises(TrainerConfigError, match=r"^timeout must be a finite number > 0"):
            fl.Trainer.setup(model, None, toy.make_sgd, timeout=bad)
