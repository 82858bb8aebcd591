"""What a restarted launched run resumes from (the real restart runs in test_multinode.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

import flodl as fl
from flodl.train import ApplyPolicy, TrainerConfigError
from flodl.train.checkpointing import SaveFdl
from flodl.train.coordinator import Coordinator, CoordinatorConfig
from flodl.train.messages import StartEpoch
from flodl.train.process_group import attempt_prefix
from flodl.train.resume import (
    ResumableCheckpoint,
    find_resume,
    job_token,
    load_model,
    restarts_allowed,
    write_state,
)


class FakeWorker:
    """What ResumableCheckpoint reads from a rank's worker."""

    def __init__(self, model: nn.Module) -> None:
        self.optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
        model(torch.ones(2, 3)).sum().backward()
        self.optimizer.step()  # some Adam state to save
        self.dataset_size, self.batch_size, self.world, self.max_batches = 100, 10, 2, None
        self.local = SimpleNamespace(lr_scale=1.0)


def attempt(monkeypatch, n: int, run_id: str = "job") -> None:
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", str(n))
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "1")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", run_id)


def save_versions(save: SaveFdl, token: str, versions: list[int]) -> nn.Module:
    model = nn.Linear(3, 1)
    writer = ResumableCheckpoint(save, FakeWorker(model), token)
    for v in versions:
        with torch.no_grad():
            model.weight.fill_(float(v))
        writer(v, model)
    return model


def test_a_restart_resumes_the_newest_complete_checkpoint_of_this_job(tmp_path, monkeypatch):
    save = SaveFdl(str(tmp_path), background=False)
    attempt(monkeypatch, 0)
    token = job_token(save)
    assert token and (tmp_path / "resume-token").read_text().splitlines() == [token, "job"]
    save_versions(save, token, [1, 2, 3])
    save.path(3).unlink()  # version 3 died before its model file was written
    attempt(monkeypatch, 1)
    assert job_token(save) == token  # a restart reads the job's token, it does not make one
    point = find_resume(save, token, epochs=5)
    assert point is not None
    assert (point.version, point.global_step) == (2, 2 * 100 // 10)
    assert point.model_path == str(save.path(2))
    model = nn.Linear(3, 1)
    load_model(model, point.model_path)
    assert model.weight.eq(2.0).all()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    optimizer.load_state_dict(point.optimizer)
    assert optimizer.state_dict()["state"][0]["step"] == 1  # Adam's state came back


def test_a_restart_never_resumes_an_earlier_job_or_a_finished_run(tmp_path, monkeypatch):
    save = SaveFdl(str(tmp_path), background=False)
    attempt(monkeypatch, 0)
    old = job_token(save)
    assert old is not None
    save_versions(save, old, [1, 2])
    attempt(monkeypatch, 0)  # a new job in the same directory...
    new = job_token(save)
    assert new != old
    attempt(monkeypatch, 1)  # ...restarted before its first checkpoint
    assert find_resume(save, job_token(save), epochs=5) is None
    assert find_resume(save, old, epochs=2) is not None  # (the old job's files are there)
    assert find_resume(save, old, epochs=2).version == 1  # version 2 = all epochs: nothing left
    assert find_resume(save, None, epochs=5) is None  # no token written: no resume
    assert find_resume(SaveFdl(str(tmp_path / "missing")), old, epochs=5) is None


def test_restarts_are_allowed_only_when_the_launcher_says_so(monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_MAX_RESTARTS", raising=False)
    assert not restarts_allowed()
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "0")
    assert not restarts_allowed()
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "3")
    assert restarts_allowed()


def test_every_restart_attempt_has_its_own_store_keys(monkeypatch):
    attempt(monkeypatch, 0, "abc")
    first = attempt_prefix()
    attempt(monkeypatch, 1, "abc")
    assert attempt_prefix() != first and "abc" in first


def config(**kw) -> CoordinatorConfig:
    return CoordinatorConfig(world=2, num_epochs=4, dataset_size=64, batch_size=8, **kw)


@pytest.mark.parametrize("policy", [ApplyPolicy.SYNC, ApplyPolicy.CADENCE])
def test_a_resumed_coordinator_starts_at_the_first_epoch_left(policy):
    coord = Coordinator(config(policy=policy, first_epoch=2, global_step=16))
    plans = [msg.plan for _, msg in coord.start(0.0) if isinstance(msg, StartEpoch)]
    assert plans and {p.epoch for p in plans} == {2}
    assert coord.global_step == 16


@pytest.mark.parametrize("first", [4, 9, -1, 1.5])
def test_a_first_epoch_outside_the_run_is_refused(first):
    with pytest.raises(TrainerConfigError, match="first_epoch"):
        config(first_epoch=first)


def graph_model():
    import flodl as fl

    model = fl.FlowBuilder(nn.Linear(3, 1)).build()
    fl.Trainer.setup(model, None, lambda p: torch.optim.SGD(p, lr=0.1))
    return model


def test_graph_epochs_counts_and_checkpoints_after_each_epochs_body(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_MAX_RESTARTS", raising=False)
    model = graph_model()
    assert list(model.epochs(3, checkpoint_every=2, directory=str(tmp_path))) == [0, 1, 2]
    # After epoch 1 (2 done), not after 3: 3 is not a multiple of 2. No launcher that restarts:
    # the model checkpoint only, no training state or token.
    assert sorted(p.name for p in tmp_path.glob("*")) == ["checkpoint-0002.fdl"]
    assert list(model.epochs(2)) == [0, 1]


def test_graph_epochs_resumes_a_restarted_job_on_one_device(tmp_path, monkeypatch):
    attempt(monkeypatch, 0)
    model = graph_model()
    for _ in model.epochs(3, checkpoint_every=1, directory=str(tmp_path)):
        model(torch.ones(4, 3)).sum().backward()
        model.step()
        if model.training_step == 2:
            break  # "killed" in epoch 1: checkpoint 1 is the last complete one
    fl.checkpoint.flush()  # checkpoint 1 is written in the background: let it complete
    weights = model.parameters().__next__().detach().clone()
    attempt(monkeypatch, 1)
    restarted = graph_model()
    assert list(restarted.epochs(3, checkpoint_every=1, directory=str(tmp_path))) == [1, 2]
    assert restarted.training_step == 1
    assert not torch.equal(restarted.parameters().__next__(), weights)  # epoch 1 is redone


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_epochs": 0}, "num_epochs"),
        ({"num_epochs": 2.5}, "num_epochs"),
        ({"num_epochs": 2, "checkpoint_every": 0}, "checkpoint_every"),
        ({"num_epochs": 2, "checkpoint_every": 1, "directory": 3}, "directory"),
    ],
)
def test_graph_epochs_rejects_bad_arguments(kwargs, message):
    with pytest.raises(TrainerConfigError, match=message):
        list(graph_model().epochs(**kwargs))


def builder_on_one_device(tmp_path, epochs: int, lrs: list[float] | None = None):
    """A Builder run on one CPU, checkpointing every epoch; ``lrs`` gets the rate each epoch
    trained at."""
    from tests.train import toy

    def record(epoch: int, worker) -> None:
        if lrs is not None:
            lrs.append(worker.optimizer.param_groups[0]["lr"])

    return (
        fl.Trainer.builder(toy.make_model, toy.make_sgd, toy.mse_step)
        .dataset(toy.regression_data(64))
        .batch_size(16)
        .num_epochs(epochs)
        .devices(["cpu"])
        .epoch_fn(record)
        .checkpoint_every(1, directory=str(tmp_path))
    )


def test_a_builder_job_of_one_rank_resumes_its_restart(tmp_path, monkeypatch):
    # torchrun --nproc-per-node 1 --max-restarts N, or an elastic job shrunk to one node: a
    # world of one runs the single-device path, which must resume as a launched world does.
    attempt(monkeypatch, 0)
    first = builder_on_one_device(tmp_path, 2).run()
    first.join()
    assert [m.epoch for m in first.history] == [0, 1]
    assert (tmp_path / "checkpoint-0002.train.pt").is_file()
    (tmp_path / "checkpoint-0002.fdl").unlink()  # "killed" before checkpoint 2 was complete
    attempt(monkeypatch, 1)
    restarted = builder_on_one_device(tmp_path, 3).run()
    restarted.join()
    assert [m.epoch for m in restarted.history] == [1, 2]
    point = find_resume(SaveFdl(str(tmp_path)), job_token(SaveFdl(str(tmp_path))), epochs=4)
    assert point is not None and (point.version, point.world) == (3, 1)
    assert point.global_step == 3 * 64 // 16


def test_a_builder_resume_takes_the_learning_rate_at_this_worlds_scale(tmp_path, monkeypatch):
    # A checkpoint of a world of 2 with lr_scale_ratio(0.5) saved rates 1.5 x the factory's;
    # a world of one trains at the factory's rate (scale 1), not at the saved one.
    from tests.train import toy

    attempt(monkeypatch, 0)
    save = SaveFdl(str(tmp_path), background=False)
    token = job_token(save)
    assert token is not None
    model = toy.make_model("cpu")
    optimizer = toy.make_sgd(model.parameters())
    optimizer.param_groups[0]["lr"] = 0.05 * 1.5
    save(1, model)
    write_state(save, 1, 4, optimizer, token, world=2, lr_scale=1.5)
    attempt(monkeypatch, 1)
    lrs: list[float] = []
    builder_on_one_device(tmp_path, 2, lrs).lr_scale_ratio(0.5).run().join()
    assert lrs == [pytest.approx(0.05)]


def graph_resumed(tmp_path, monkeypatch, *, world: int, steps_per_epoch: int | None, loader: bool):
    """A Graph-mode restart (one rank) from a checkpoint a world of ``world`` wrote after 2
    epochs of ``steps_per_epoch`` steps each (16 when not recorded)."""
    attempt(monkeypatch, 0)
    save = SaveFdl(str(tmp_path), background=False)
    token = job_token(save)
    assert token is not None
    model = graph_model()
    save(2, model)
    per_epoch = steps_per_epoch or 16
    write_state(save, 2, 2 * per_epoch, None, token, world=world, steps_per_epoch=steps_per_epoch)
    attempt(monkeypatch, 1)
    restarted = graph_model()
    if loader:  # 64 samples in batches of 2: 32 steps per epoch for one rank
        data = fl.data.DataLoader.from_tensors(torch.ones(64, 3), torch.ones(64, 1))
        restarted.set_data_loader(data.batch_size(2))
    epochs = restarted.epochs(4, checkpoint_every=1, directory=str(tmp_path))
    assert next(epochs) == 2
    return restarted.training_step


def test_graph_mode_rescales_the_step_of_a_checkpoint_another_world_wrote(tmp_path, monkeypatch):
    # Written by 2 ranks of 16 steps per epoch; one rank runs 32 per epoch: after 2 epochs an
    # uninterrupted run of one rank stands at step 64, and so does a step-based schedule.
    assert graph_resumed(tmp_path, monkeypatch, world=2, steps_per_epoch=16, loader=True) == 64


def test_graph_mode_keeps_the_step_when_a_world_change_cannot_be_measured(
    tmp_path, monkeypatch, caplog
):
    assert graph_resumed(tmp_path, monkeypatch, world=2, steps_per_epoch=16, loader=False) == 32
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "written by a world of 2, this run has 1" in said and "stays 32" in said


def test_graph_mode_keeps_the_step_of_a_checkpoint_of_the_same_world(tmp_path, monkeypatch):
    assert graph_resumed(tmp_path, monkeypatch, world=1, steps_per_epoch=32, loader=True) == 64


def test_attempt_0_of_a_run_id_already_in_the_directory_says_it_starts_over(
    tmp_path, monkeypatch, caplog
):
    # A node joining an elastic job restarts its ranks as attempt 0: flodl cannot resume it, and
    # says so instead of starting again at epoch 0 in silence.
    save = SaveFdl(str(tmp_path), background=False)
    attempt(monkeypatch, 0, "elastic")
    first = job_token(save)
    assert not [r for r in caplog.records if "run id" in r.getMessage()]
    attempt(monkeypatch, 0, "elastic")
    assert job_token(save) != first
    said = [r.getMessage() for r in caplog.records if "run id elastic" in r.getMessage()]
    assert said and "training starts at epoch 0" in said[0] and "node joins" in said[0]
    attempt(monkeypatch, 0, "another")  # a new job of its own run id: nothing to say
    caplog.clear()
    job_token(save)
    assert not [r for r in caplog.records if "run id" in r.getMessage()]
