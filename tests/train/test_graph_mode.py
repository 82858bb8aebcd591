"""Graph mode: fl.Trainer.setup(model, ...) then the user's loop with model.step()."""

from __future__ import annotations

import copy
import functools
import re
import subprocess
import sys
import threading
import time

import pytest
import torch
from torch import nn

import flodl as fl
import flodl.checkpoint.background as background
from flodl._torch_release import TORCH_RELEASE
from flodl.train.errors import TrainerConfigError
from tests.fixtures.failing_saves import path_failing_at_write
from tests.train import graph_ranks
from tests.train.launched import run_launched
from tests.train.leftovers import Leftovers


def make_graph(seed: int = 0) -> fl.Graph:
    torch.manual_seed(seed)
    return fl.FlowBuilder(nn.Linear(4, 8)).through(nn.Tanh()).through(nn.Linear(8, 1)).build()


def regression(n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 4, generator=g)
    return x, x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])


def sgd(params):
    return torch.optim.SGD(params, lr=0.05)


# ------------------------------------------------------------------ single device
def test_setup_on_one_device_trains_with_step():
    model = make_graph()
    x, y = regression()
    fl.Trainer.setup(model, make_graph, sgd)
    assert (model.is_distributed, model.world_size, model.rank) == (False, 1, 0)
    assert model.training
    before = nn.functional.mse_loss(model(x), y).item()
    for _ in range(30):
        nn.functional.mse_loss(model(x), y).backward()
        model.step()
    assert model.training_step == 30
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())  # zero_grad ran
    assert nn.functional.mse_loss(model(x), y).item() < before / 4
    model.finish()  # nothing to release on one device; the model still trains
    model(x).sum().backward()
    model.step()
    assert model.training_step == 31


def test_setup_leaves_the_single_device_model_where_it_is():
    model = make_graph().double()
    fl.Trainer.setup(model, None, sgd)
    assert model.device == torch.device("cpu")
    assert next(model.parameters()).dtype == torch.float64


def test_setup_refuses_a_plain_module_and_points_at_the_builder():
    with pytest.raises(TrainerConfigError, match=r"Trainer\.builder") as err:
        fl.Trainer.setup(nn.Linear(2, 1), None, sgd)
    assert "Sequential" not in str(err.value) and "Linear" in str(err.value)


def test_setup_rejects_bad_factories():
    with pytest.raises(TrainerConfigError, match="optim_factory must be callable"):
        fl.Trainer.setup(make_graph(), None, torch.optim.SGD([torch.zeros(1)], lr=0.1))
    with pytest.raises(TrainerConfigError, match=r"must return a torch\.optim\.Optimizer"):
        fl.Trainer.setup(make_graph(), None, lambda params: list(params))
    with pytest.raises(TrainerConfigError, match="replica_factory must be callable"):
        fl.Trainer.setup(make_graph(), "cpu", sgd)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.step(),
        lambda m: m.set_lr(0.1),
        lambda m: m.set_scheduler(fl.optim.StepDecay(0.1, 2, 0.5)),
        lambda m: m.epoch(0),
        lambda m: m.set_data_loader(None),
        lambda m: m.finish(),
    ],
    ids=["step", "set_lr", "set_scheduler", "epoch", "set_data_loader", "finish"],
)
def test_training_methods_before_setup_say_to_call_setup(call):
    model = make_graph()
    with pytest.raises(fl.TrainingNotSetUpError, match=r"fl\.Trainer\.setup\(model"):
        call(model)
    assert (model.training_step, model.world_size, model.optimizer) == (0, 1, None)


def test_a_copy_of_a_set_up_graph_is_not_set_up():
    model = make_graph()
    fl.Trainer.setup(model, None, sgd)
    clone = copy.deepcopy(model)
    assert model.optimizer is not None and clone.optimizer is None
    with pytest.raises(fl.TrainingNotSetUpError):
        clone.step()


def test_step_without_an_optimizer_is_a_no_op_and_set_lr_is_safe():
    model = make_graph()
    fl.Trainer.setup(model, None, None)
    before = [p.detach().clone() for p in model.parameters()]
    model(torch.ones(2, 4)).sum().backward()
    model.set_lr(0.5)
    model.step()
    assert model.training_step == 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert all(p.grad is not None for p in model.parameters())  # left for the user's optimizer


def test_set_lr_sets_every_group_and_keeps_group_scales():
    model = make_graph()
    first, *_, second = model.children()
    fl.Trainer.setup(
        model,
        None,
        lambda _: torch.optim.SGD(
            [{"params": first.parameters(), "lr_scale": 0.1}, {"params": second.parameters()}],
            lr=1.0,
        ),
    )
    model.set_lr(0.5)
    assert [g["lr"] for g in model.optimizer.param_groups] == pytest.approx([0.05, 0.5])


def test_scheduler_must_give_a_learning_rate():
    model = make_graph()
    with pytest.raises(TrainerConfigError, match=r"\.lr\(step\)"):
        fl.Trainer.setup(model, None, sgd, scheduler=0.1)
    for bad in (0, -1.0, float("inf"), "2", True, None):
        with pytest.raises(TrainerConfigError, match="lr_scale must be a finite number > 0"):
            fl.Trainer.setup(model, None, sgd, lr_scale=bad)


# ------------------------------------------------------------------ LR
def test_scheduler_lr_comes_from_the_pre_increment_step_times_lr_scale():
    model = make_graph()
    fl.Trainer.setup(model, None, sgd, scheduler=lambda step: 0.1 * (step + 1), lr_scale=2.0)
    seen = []
    for _ in range(3):
        model(torch.ones(1, 4)).sum().backward()
        model.step()
        seen.append(fl.optim.get_lr(model.optimizer))
    assert seen == pytest.approx([0.2, 0.4, 0.6])  # steps 0, 1, 2 — each × 2


def test_without_a_scheduler_lr_scale_scales_the_built_rates_once_and_set_lr_is_exact():
    model = make_graph()
    first, *_, second = model.children()
    fl.Trainer.setup(
        model,
        None,
        lambda _: torch.optim.SGD(
            [{"params": first.parameters(), "lr": 0.01}, {"params": second.parameters()}], lr=0.1
        ),
        lr_scale=3.0,
    )
    for _ in range(2):  # scaled once, at setup: steps do not compound it
        model(torch.ones(1, 4)).sum().backward()
        model.step()
        assert [g["lr"] for g in model.optimizer.param_groups] == pytest.approx([0.03, 0.3])
    model.set_lr(0.02)  # an explicit rate is the rate
    model(torch.ones(1, 4)).sum().backward()
    model.step()
    assert fl.optim.get_lr(model.optimizer) == 0.02
    model.set_scheduler(None, lr_scale=1.0)  # a new scale rescales the current rates
    assert fl.optim.get_lr(model.optimizer) == pytest.approx(0.02 / 3)


@pytest.mark.parametrize("scale", [1.0, 2.5])
def test_manual_loop_and_graph_step_follow_the_same_multistep_trajectory(scale):
    schedule = fl.optim.MultiStepLR(0.01, [4, 8], 0.5)
    x, y = regression(16)

    manual = make_graph()
    opt = sgd(manual.parameters())
    manual_lrs = []
    for step in range(12):
        fl.optim.set_lr(opt, schedule.lr(step) * scale)
        manual_lrs.append(fl.optim.get_lr(opt))
        nn.functional.mse_loss(manual(x), y).backward()
        opt.step()
        opt.zero_grad()

    graph = make_graph()
    fl.Trainer.setup(graph, None, sgd)
    graph.set_scheduler(schedule, lr_scale=scale)
    graph_lrs = []
    for _ in range(12):
        nn.functional.mse_loss(graph(x), y).backward()
        graph.step()
        graph_lrs.append(fl.optim.get_lr(graph.optimizer))

    assert graph_lrs == manual_lrs
    assert len(set(graph_lrs)) == 3  # exactly two drops, at steps 4 and 8
    assert graph_lrs[3] > graph_lrs[4] > graph_lrs[8] == graph_lrs[11]
    for a, b in zip(manual.parameters(), graph.parameters(), strict=True):
        assert torch.equal(a, b)


# ------------------------------------------------------------------ data
def test_epoch_iterates_the_attached_loader_deterministically():
    model = make_graph()
    fl.Trainer.setup(model, None, sgd)
    ids = torch.arange(40, dtype=torch.float32).unsqueeze(1)
    model.set_data_loader(fl.data.DataLoader.from_tensors(ids).batch_size(8).seed(3))

    def order(e):
        return [int(i) for (batch,) in model.epoch(e) for i in batch.flatten().tolist()]

    assert sorted(order(0)) == list(range(40))
    assert order(0) == order(0) and order(0) != order(1)


def test_parameters_gone_non_finite_are_warned_about_after_the_epoch(caplog):
    model = make_graph()
    fl.Trainer.setup(model, None, sgd)
    model.set_data_loader(fl.data.DataLoader.from_tensors(*regression()).batch_size(16))
    for epoch in range(2):
        for x, y in model.epoch(epoch):
            loss = nn.functional.mse_loss(model(x), y)
            (loss * float("nan") if model.training_step == 1 else loss).backward()
            model.step()
    said = [r.getMessage() for r in caplog.records if "not finite" in r.getMessage()]
    assert said == [  # once, at the first epoch's end
        "graph mode: the parameters are not finite after epoch 0 (training step 4) — lower the "
        "learning rate or clip gradients (fl.DdpConfig(max_grad_norm=...)); training goes on"
    ]


def test_the_end_of_epoch_check_takes_lazy_parameters_and_never_ends_the_loop(caplog):
    model = make_graph()
    fl.Trainer.setup(model, None, sgd)
    model.never_called = nn.LazyLinear(2)  # a parameter with no values yet
    model.set_data_loader(fl.data.DataLoader.from_tensors(*regression()).batch_size(16))
    for epoch in range(2):  # the check used to raise at the first epoch's end
        for x, y in model.epoch(epoch):
            loss = nn.functional.mse_loss(model(x), y)
            (loss * float("nan") if model.training_step == 1 else loss).backward()
            model.step()
    said = [r.getMessage() for r in caplog.records if "not finite" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(
        "graph mode: the parameters are not finite after epoch 0"
    )


def test_epoch_without_a_loader_and_wrong_loaders_are_clear_errors():
    model = make_graph()
    fl.Trainer.setup(model, None, sgd)
    with pytest.raises(TrainerConfigError, match=r"set_data_loader\(loader\) first"):
        model.epoch(0)
    with pytest.raises(TrainerConfigError, match=r"expected an fl\.data\.DataLoader"):
        model.set_data_loader(torch.utils.data.DataLoader(range(4)))
    shard = fl.data.DataLoader.from_tensors(torch.zeros(8, 1)).batch_size(2).partition(1, 2).build()
    with pytest.raises(TrainerConfigError, match="rank 1 of 2 but this process is rank 0 of 1"):
        model.set_data_loader(shard)


# ------------------------------------------------------------------ DdpConfig (El Che knobs)
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_anchor": -1}, "max_anchor must be an integer >= 0"),
        ({"overhead_target": 0}, "overhead_target must be a finite number > 0"),
        ({"max_grad_norm": float("nan")}, "max_grad_norm must be a finite number > 0"),
        ({"speed_hint": 2.0}, r"speed_hint must be \(slow_rank, ratio\)"),
        ({"average": "weights"}, "average must be one of 'params', 'grads'"),
    ],
)
def test_ddp_config_rejects_bad_knobs(kwargs, message):
    with pytest.raises(TrainerConfigError, match=message):
        fl.DdpConfig(**kwargs)


def test_ddp_config_builds_the_graph_mode_el_che():
    el = fl.DdpConfig(overhead_target=0.9, max_anchor=50).el_che(2)
    assert (el.anchor, el.max_anchor, el.overhead_target, el.batch_counts) == (
        10,
        50,
        0.5,
        [10, 10],
    )
    assert fl.DdpConfig(max_anchor=4).el_che(3).batch_counts == [4, 4, 4]  # cap below 10 pins it
    assert fl.DdpConfig(speed_hint=(0, 2.5)).el_che(2).batch_counts == [10, 25]
    assert not fl.DdpConfig(max_anchor=0).el_che_enabled
    with pytest.raises(TrainerConfigError, match="slow_rank 2 is not a rank"):
        fl.DdpConfig(speed_hint=(2, 2.0)).el_che(2)


def test_config_on_one_device_keeps_lockstep_and_clips_the_gradient():
    model = make_graph()
    x, y = regression()
    with pytest.raises(TrainerConfigError, match=r"config must be an fl\.DdpConfig"):
        fl.Trainer.setup(model, None, sgd, config={"max_anchor": 0})
    fl.Trainer.setup(
        model, None, lambda p: torch.optim.SGD(p, lr=1.0), config=fl.DdpConfig(max_grad_norm=0.01)
    )
    assert not model.has_el_che and model.el_che is None  # El Che needs several ranks
    before = [p.detach().clone() for p in model.parameters()]
    (100 * nn.functional.mse_loss(model(x), y)).backward()
    model.step()
    moved = torch.cat(
        [(p.detach() - b).flatten() for p, b in zip(model.parameters(), before, strict=True)]
    )
    assert moved.norm().item() == pytest.approx(0.01, rel=1e-4)  # lr 1 × clipped norm


# ------------------------------------------------------------------ several ranks
@pytest.mark.slow
def test_two_ranks_share_weights_partition_data_and_agree_on_missing_gradients():
    outs = run_launched(graph_ranks.scenario, 2, timeout=90)
    zero, one = outs
    assert zero["world"] == one["world"] == 2 and zero["distributed"]
    assert not zero["has_el_che"] and not one["has_el_che"]  # same device kind: lockstep
    assert zero["after_setup"] == one["after_setup"]  # rank 0's initial weights everywhere
    for epoch in range(2):  # every sample once across ranks, same batch count per rank
        assert sorted(zero["epochs"][epoch] + one["epochs"][epoch]) == list(range(64))
        assert len(zero["epochs"][epoch]) == len(one["epochs"][epoch]) == 32
    assert zero["epochs"][0] != zero["epochs"][1]
    assert zero["after_step"] == one["after_step"] != zero["after_setup"]
    assert zero["training_step"] == one["training_step"] == 1
    for out in outs:
        assert out["finished"]  # model.finish() released the group
        assert re.search(r"ranks would run \d to \d batches", out["uneven_error"])


@pytest.mark.multiproc
def test_a_rank_with_no_batches_is_refused_on_every_rank_at_once():
    outs = run_launched(graph_ranks.empty_shard_scenario, 2, timeout=60)
    for out in outs:
        assert out["error_type"] == "TrainerConfigError"
        assert out["message"].startswith(
            "set_data_loader: ranks would run 0 to 1 batches per epoch"
        )
        assert "a rank with 0 batches has no samples of its own" in out["message"]
        assert out["seconds"] < 5  # not the 15 s timeout


@pytest.mark.multiproc
def test_when_every_rank_timed_out_no_rank_is_blamed():
    # The grace for 30 s is 7.5 s; with every rank in, nobody waits it out.
    outs = run_launched(graph_ranks.timed_out_together_scenario, 2, timeout=90)
    for out in outs:
        assert out["missing"] is None
        assert out["seconds"] < 5


EXIT_ABORT = "terminate called without an active exception"


def run_example(repo_root, *args: str, ranks: int = 1) -> str:
    """examples/graph_ddp.py alone or under torchrun (one thread per rank); its stdout."""
    from tests.conftest import clean_env

    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)]
    result = subprocess.run(
        [
            sys.executable,
            *(launcher if ranks > 1 else []),
            str(repo_root / "examples" / "graph_ddp.py"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=clean_env(OMP_NUM_THREADS="1"),
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert EXIT_ABORT not in result.stderr  # every rank exits cleanly
    return result.stdout


@pytest.mark.slow
def test_torchrun_example_trains_identical_ranks_and_averages_gradients_exactly(repo_root):
    out = run_example(repo_root, "--epochs", "2", "--verify", ranks=2)
    checks = re.findall(r"rank (\d): gradient check max abs diff ([\d.e+-]+)", out)
    assert sorted(r for r, _ in checks) == ["0", "1"]
    assert all(float(d) < 1e-5 for _, d in checks)  # averaged half batches == full batch
    runs = re.findall(
        r"rank (\d): world (\d) steps (\d+) batches \d+ loss ([\d.]+) -> ([\d.]+) "
        r"digest ([0-9a-f]{16})",
        out,
    )
    assert sorted(r for r, *_ in runs) == ["0", "1"]
    assert {(w, s) for _, w, s, *_ in runs} == {("2", "32")}  # 1024 / 2 ranks / 32 × 2 epochs
    assert len({d for *_, d in runs}) == 1  # identical parameters and buffers on both ranks
    for _, _, _, start, end, _ in runs:
        assert float(end) < float(start) / 4


@pytest.mark.slow
def test_torchrun_example_with_el_che_gives_the_slow_rank_fewer_batches(repo_root):
    out = run_example(repo_root, "--epochs", "2", "--el-che", "--slow-rank", "1", ranks=2)
    runs = {
        r: (int(steps), int(batches), float(start), float(end), d)
        for r, steps, batches, start, end, d in re.findall(
            r"rank (\d): world 2 steps (\d+) batches (\d+) loss ([\d.]+) -> ([\d.]+) "
            r"digest ([0-9a-f]{16})",
            out,
        )
    }
    (steps0, fast, start, end, digest0), (steps1, slow, _, _, digest1) = runs["0"], runs["1"]
    # fl.DdpConfig() averages parameters: every batch is a local step, as on one device.
    assert (steps0, steps1) == (fast, slow)
    assert fast + slow >= 2 * (32 - 1)  # both epochs shared out (32 batches each, bar the last)
    assert fast > slow  # lockstep would split evenly (the ratio itself depends on the load)
    assert end < start / 4
    assert digest0 == digest1  # each window ends with the ranks' weighted mean


def test_example_runs_on_one_device(repo_root):
    out = run_example(repo_root, "--epochs", "1", "--verify")
    assert "rank 0: gradient check max abs diff 0.000e+00" in out
    assert re.search(r"rank 0: world 1 steps 32 batches 32 loss", out)


@pytest.mark.parametrize("name", ["flodl.graph.training", "flodl.train.trainer"])
def test_docstring_examples(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.slow
@pytest.mark.parametrize("average", ["gradients", "params"])
def test_el_che_gives_the_faster_rank_more_batches_and_keeps_the_ranks_identical(average):
    scenario = functools.partial(graph_ranks.el_che_scenario, average=average)
    outs = run_launched(scenario, 2, timeout=120)
    zero, one = outs
    assert zero["has_el_che"] and one["has_el_che"]
    assert zero["first_counts"] == one["first_counts"] == [20, 10]  # the speed hint
    # Both ranks synced the same windows; the counts track the 3x speed ratio after calibration.
    assert zero["history"] == one["history"] and len(zero["history"]) >= 3
    assert zero["history"][0] == [20, 10]
    later = zero["history"][1:-1]  # the last window is scaled down to the epoch's remainder
    assert later and all(2.0 <= a / b <= 4.5 for a, b in later), zero["history"]
    # Every sample at most once per epoch across ranks, and all but the last batch's worth.
    seen = zero["seen"] + one["seen"]
    assert len(seen) == len(set(seen)) >= 800 - 4
    assert len(zero["seen"]) > 2 * len(one["seen"])  # the fast rank was not held to lockstep
    expected = [  # the mean gradient over the first window's 30 batches
        [(a + b) / 30 for a, b in zip(g0, g1, strict=True)]
        for g0, g1 in zip(zero["first_grad_sum"], one["first_grad_sum"], strict=True)
    ]
    if average == "gradients":  # one optimizer step per window, with that mean gradient
        assert zero["steps"] == one["steps"] == len(zero["history"])
        for out in outs:
            for got, want in zip(out["first_update"], expected, strict=True):
                assert got == pytest.approx(want, rel=1e-4, abs=1e-6)
        assert zero["loss_after"] < zero["loss_before"] / 4
        assert zero["steps_after_break"] == one["steps_after_break"] == 1  # what ran is synced
    else:  # local SGD: every batch steps its own rank's optimizer, parameters averaged per window
        assert (zero["steps"], one["steps"]) == (zero["batches"], one["batches"])
        for out in outs:  # the first step used this rank's own first batch only
            for got, own in zip(out["first_update"], out["first_grad_sum"], strict=True):
                assert got == pytest.approx(own, rel=1e-4, abs=1e-6)
        # Each window averages in the slow rank's less-trained parameters, and how many batches
        # each rank runs depends on the machine's load: the fall is 8-15x, so ask for 4x.
        assert zero["loss_after"] < zero["loss_before"] / 4
    # A step outside model.epoch() turns El Che off everywhere; the ranks end identical.
    assert any("El Che is off" in w for w in zero["off_warning"])
    assert not zero["has_el_che_after"] and not one["has_el_che_after"]
    assert zero["digest"] == one["digest"]


@pytest.mark.multiproc
def test_el_che_does_not_time_a_rank_s_warm_up_batch():
    # Rank 1's first batch takes 1 s, every other batch 4 ms on both ranks: timed, that batch
    # made rank 1 look 25x slower, and El Che's counts still said 4.7x at the epoch's end.
    outs = run_launched(graph_ranks.warm_up_scenario, 2, timeout=120)
    for out in outs:
        assert "error" not in out, out["error"]
    zero, one = outs
    assert zero["has_el_che"] and zero["counts"] == one["counts"]
    fast, slow = zero["counts"]
    assert fast / slow <= 3, zero["counts"]


def test_graph_mode_finish_waits_for_background_saves_and_raises_their_failure(tmp_path):
    model = make_graph()
    fl.Trainer.setup(model, None, lambda p: torch.optim.SGD(p, lr=0.1))
    gate = threading.Event()
    background.default_worker().submit(gate.wait)  # the writer is busy: the save stays queued
    model.save_checkpoint(tmp_path / "last.fdl", background=True)
    threading.Timer(0.2, gate.set).start()
    model.finish()
    assert model.load_checkpoint(tmp_path / "last.fdl").loaded  # written before finish returned
    with path_failing_at_write(tmp_path) as path:
        model.save_checkpoint(path, background=True)
    with pytest.raises(fl.CheckpointError, match="directory exists"):
        model.finish()


TORCHRUN_TWO_RANKS = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
TORCHRUN_TWO_RANKS += ["--nproc-per-node", "2"]
CRASHING_RANK = """
import os, sys, time, torch, flodl as fl
from torch import nn
model = fl.FlowBuilder(nn.Linear(4, 1)).build()
fl.Trainer.setup(model, None, lambda p: torch.optim.SGD(p, lr=0.1), timeout=60)
if os.environ["RANK"] == "1":
    raise RuntimeError("rank 1 fails")
time.sleep(40)  # rank 0 is still training when rank 1 dies
open(sys.argv[1], "w").write("rank 0 finished")
model.finish()
"""


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_an_uncaught_exception_ends_the_torchrun_job_at_once(tmp_path):
    """A rank that crashes skips the exit barrier (it knows from the interpreter, not from a
    replaced sys.excepthook), so the launcher sees it fail and stops rank 0 mid-training
    instead of the crashed rank waiting in the barrier for rank 0 to finish."""
    from tests.conftest import clean_env

    script, marker = tmp_path / "crash.py", tmp_path / "finished"
    script.write_text(CRASHING_RANK)
    leftovers = Leftovers(tmp_path)
    result = subprocess.run(
        [*TORCHRUN_TWO_RANKS, str(script), str(marker)],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(OMP_NUM_THREADS="1", **leftovers.env()),
        check=False,
    )
    assert result.returncode != 0
    assert "RuntimeError: rank 1 fails" in result.stderr
    assert not marker.exists()  # rank 0 was stopped before its 40 s of training ended
    leftovers.check()


LATE_OR_STUCK_RANK = """
import os, sys, time, pathlib, torch, flodl as fl
from torch import nn
mode, who, meet = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
late = sys.argv[4] if len(sys.argv) > 4 else None  # a rank 3 s late into the stuck step
rank = os.environ["RANK"]
# The ranks reach setup together (three interpreters importing torch on a loaded machine can be
# further apart than the 5 s timeout), but for the one late on purpose.
(meet / rank).touch()
deadline = time.monotonic() + 60
while len(list(meet.iterdir())) < int(os.environ["WORLD_SIZE"]) and time.monotonic() < deadline:
    time.sleep(0.05)
if mode == "late" and rank == who:
    time.sleep(12)  # joins after the others' 5 s
model = fl.FlowBuilder(nn.Linear(4, 1)).build()
fl.Trainer.setup(model, None, lambda p: torch.optim.SGD(p, lr=0.1), timeout=5)
for step in range(3):
    model(torch.ones(2, 4)).sum().backward()
    if mode == "stuck" and step == 1 and rank == who:
        time.sleep(300)  # alive, but stuck in its own code: never reaches the next averaging
    if step == 1 and rank == late:
        time.sleep(3)
    model.step()
model.finish()
"""


def under_torchrun_three_ranks(
    tmp_path, mode: str, who: str, late: str | None = None
) -> tuple[str, float]:
    """LATE_OR_STUCK_RANK under torchrun (3 ranks): it fails; its stderr, and how long it took.
    Nothing is left behind. The stderr is the launcher's, then each rank's own (torchrun tees
    every rank's into a file): ranks writing at once interleave on the shared pipe, even within
    a line."""
    from tests.conftest import clean_env

    script, meet, logs = tmp_path / "job.py", tmp_path / "meet", tmp_path / "logs"
    script.write_text(LATE_OR_STUCK_RANK)
    meet.mkdir()
    leftovers = Leftovers(tmp_path)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    launcher += ["--log-dir", str(logs), "--tee", "2"]
    started = time.monotonic()
    result = subprocess.run(
        [*launcher, "--nproc-per-node", "3", str(script), mode, who, str(meet)]
        + ([late] if late else []),
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(OMP_NUM_THREADS="1", **leftovers.env()),
        check=False,
    )
    took = time.monotonic() - started
    assert result.returncode != 0
    leftovers.check()
    ranks = [f.read_text() for f in sorted(logs.rglob("stderr.log"))]
    assert len(ranks) == 3, sorted(logs.rglob("*"))
    return "\n".join([result.stderr, *ranks]), took


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.parametrize("stuck", ["2", "0"])
def test_under_torchrun_the_ranks_waiting_on_a_stuck_rank_name_it(tmp_path, stuck):
    """Under torchrun no rank started the others, so none can see which is alive: the ranks
    whose averaging timed out say so in the group's store, and the one that never did is named
    (rank 0 too, whose process would host the store without torchrun), instead of gloo's
    "Timed out waiting 5000ms for recv". The launcher then ends the stuck rank."""
    stderr, took = under_torchrun_three_ranks(tmp_path, "stuck", stuck)
    named = re.findall(
        r"TrainingError: a collective waited 5 s \(Trainer.setup's timeout\) for rank (\d), "
        r"which never reached it \(stuck in its own code, or far slower than the others\); "
        r"rank (\d) stops here",
        stderr,
    )
    # Every rank that waited names the stuck one (the launcher may end the second a moment
    # before it reports); the stuck rank never speaks.
    assert named and {n for n, _ in named} == {stuck}, stderr[-4000:]
    assert stuck not in {r for _, r in named}
    assert took < 100  # 5 s timeout + 5 s grace, not 300 s of stall


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_under_torchrun_a_rank_whose_peer_timed_out_first_still_names_the_stuck_rank(tmp_path):
    # Rank 0 reaches the averaging 3 s after rank 1; rank 2 never does. Rank 1 times out first
    # and gloo closes its connections: rank 0 gets "Connection closed by peer" before its own
    # timeout. It finds rank 1's timeout in the store and joins the diagnosis, instead of
    # leaving with gloo's error (the launcher then ended rank 1 before it named anyone).
    stderr, took = under_torchrun_three_ranks(tmp_path, "stuck", "2", late="0")
    named = re.findall(
        r"TrainingError: a collective waited 5 s \(Trainer.setup's timeout\) for rank (\d), "
        r"which never reached it .*; rank (\d) stops here",
        stderr,
    )
    # Rank 0 joined the diagnosis at once (its key in the store): rank 1, or rank 0 when the
    # launcher did not end it first, names rank 2 alone.
    assert named and {n for n, _ in named} == {"2"}, stderr[-4000:]
    assert took < 100


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_under_torchrun_a_rank_joining_after_setups_timeout_is_named(tmp_path):
    # Rank 1 reaches setup 12 s after the others, whose setup waits 5 s: they name it, instead
    # of torch's "wait timeout after 5000ms, keys: /flodl/<run>/attempt-0//0//cpu//0/1".
    stderr, took = under_torchrun_three_ranks(tmp_path, "late", "1")
    # torch 2.4's store client is unusable after its wait timed out ("Socket Timeout"), so the
    # ranks cannot read who checked in: the message then says "a rank".
    who = "rank 1" if TORCH_RELEASE >= (2, 5) else "a rank"
    late = (
        f"TrainingError: {who} did not join the group within 5 s (Trainer.setup's timeout): it "
        "started late"
    )
    assert late in stderr, stderr[-4000:]
    assert took < 100


GROUP_TEARDOWN = """
import os
import torch, torch.distributed as dist
import flodl
from flodl.train.process_group import init_launched_group, leave_group

def threads():
    return set(os.listdir(f"/proc/{os.getpid()}/task"))

before = threads()
init_launched_group("gloo", 30)
dist.all_reduce(torch.ones(3))
group = threads() - before  # the group's threads (gloo's workers and its device loop)
torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=0.1)  # imports torch._dynamo & co.
dist.all_reduce(torch.ones(3))
print("during", len(group & threads()))
leave_group()
print("after", len(group & threads()))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="lists threads in /proc")
def test_leaving_the_group_ends_its_threads_even_after_building_an_optimizer():
    # Building a torch optimizer after the group exists imports torch.distributed.nn.functional,
    # whose functions take the default group as a default argument: a group captured there
    # outlived destroy_process_group, with its gloo threads running until the interpreter
    # shut down, where one releasing a tensor aborted the process.
    from tests.conftest import clean_env
    from tests.train.test_multinode import free_port

    env = clean_env(
        OMP_NUM_THREADS="1",
        RANK="0",
        WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
    )
    result = subprocess.run(
        [sys.executable, "-c", GROUP_TEARDOWN],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    during, after = result.stdout.splitlines()
    assert during != "during 0", result.stdout  # the probe sees the group's threads
    assert after == "after 0", result.stdout
