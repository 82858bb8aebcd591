"""One local optimizer step for every path: a manual loop with fl.optim.apply, Builder mode (one
device and two CPU ranks) and Graph mode train with the same rates, group by group."""

from __future__ import annotations

import pytest
import torch

import flodl as fl
from flodl.train.errors import TrainerConfigError
from flodl.train.local_step import LocalStep
from tests.train import toy

DATA = toy.regression_data(64)
BATCH = 16


def manual_loop(epochs: int) -> list[torch.Tensor]:
    """The reference: ``fl.optim.apply`` with a plain ``step -> lr`` function, per step k."""
    model = toy.make_model("cpu")
    opt = toy.make_grouped_sgd(model.parameters())
    x, y = DATA
    step = 0
    for epoch in range(epochs):
        order = fl.data.sampling.make_partition(0, len(x), len(x), epoch, seed=42)
        for b in range(len(x) // BATCH):
            idx = order[b * BATCH : (b + 1) * BATCH]
            fl.optim.apply(toy.half, opt, step)
            toy.mse_step(model, (x[idx], y[idx])).backward()
            opt.step()
            opt.zero_grad()
            step += 1
    assert [g["lr"] for g in opt.param_groups] == [0.5, 0.05]
    return [p.detach() for p in model.parameters()]


def test_fl_optim_apply_takes_a_plain_function_like_both_trainer_modes():
    opt = toy.make_grouped_sgd(toy.make_model("cpu").parameters())
    assert fl.optim.apply(lambda step: 0.1 * (step + 1), opt, 2) == pytest.approx(0.3)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.3, 0.03])
    with pytest.raises(fl.optim.OptimError, match=r"\.lr\(step\).*or a function step -> lr"):
        fl.optim.apply(0.1, opt, 0)


def test_builder_one_device_honours_group_lr_scale_like_fl_optim_apply():
    state = (
        fl.Trainer.builder(toy.make_model, toy.make_grouped_sgd, toy.mse_step)
        .dataset(DATA)
        .batch_size(BATCH)
        .num_epochs(2)
        .scheduler(toy.half_schedule)
        .run()
        .join()
    )
    for got, want in zip(state.params, manual_loop(2), strict=True):
        assert torch.allclose(got, want, atol=1e-6)


def test_graph_mode_trains_exactly_like_fl_optim_apply():
    graph = fl.FlowBuilder(toy.make_model("cpu")).build()
    fl.Trainer.setup(graph, None, toy.make_grouped_sgd, scheduler=toy.half)
    x, y = DATA
    graph.set_data_loader(fl.data.DataLoader.from_tensors(x, y).batch_size(BATCH).seed(42))
    for epoch in range(2):
        for batch in graph.epoch(epoch):
            toy.mse_step(graph, batch).backward()
            graph.step()
    assert [g["lr"] for g in graph.optimizer.param_groups] == [0.5, 0.05]
    assert graph.training_step == 8


def test_local_step_queries_the_scheduler_once_per_step_at_k():
    asked: list[int] = []

    def schedule(step: int) -> float:
        asked.append(step)
        return 0.1

    w = torch.nn.Parameter(torch.ones(1))
    local = LocalStep(torch.optim.SGD([w], lr=1.0), scheduler=schedule)
    for k in range(3):
        assert local.prepare(k) == pytest.approx(0.1)  # before the forward pass
        assert local.run([w], step=k, loss=w.sum())
    local.run([w], step=3, loss=w.sum())  # not prepared: run queries it itself
    assert asked == [0, 1, 2, 3]
    assert w.grad is None  # zero_grad(set_to_none=True)


@pytest.mark.parametrize("bad", [0, -2.0, float("inf"), float("nan"), "2", True])
def test_lr_scale_is_a_finite_positive_number(bad):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1.0)
    with pytest.raises(TrainerConfigError, match="lr_scale must be a finite number > 0"):
        LocalStep(opt, lr_scale=bad)


@pytest.mark.multiproc
@pytest.mark.timeout(240)
def test_builder_two_ranks_honour_group_lr_scale(tmp_path, monkeypatch):
    log = tmp_path / "groups.log"
    monkeypatch.setenv(toy.GROUP_LOG, str(log))
    (
        fl.Trainer.builder(toy.make_model, toy.make_grouped_sgd, toy.mse_step)
        .dataset(DATA)
        .batch_size(8)
        .num_epochs(2)
        .threads_per_rank(1)
        .devices(["cpu", "cpu"])
        .timeout(20)
        .policy(fl.ApplyPolicy.SYNC)
        .scheduler(toy.half_schedule)
        .epoch_fn(toy.logging_group_lrs)
        .run()
        .join()
    )
    # At epoch 1 each rank's optimizer holds the rates its last step of epoch 0 trained with.
    rows = sorted(line.split() for line in log.read_text().splitlines())
    later = [r for r in rows if r[1] == "1"]
    assert [r[0] for r in later] == ["0", "1"]
    assert all([float(v) for v in r[2:]] == [0.5, 0.05] for r in later), rows
