"""What a restarted launched run resumes from (the real restart runs in test_multinode.py)."""

from __future__ import annotations

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
)


class FakeWorker:
    """What ResumableCheckpoint reads from a rank's worker."""

    def __init__(self, model: nn.Module) -> None:
        self.optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
        model(torch.ones(2, 3)).sum().backward()
        self.optimizer.step()  # some Adam state to save
        self.dataset_size, self.batch_size, self.world, self.max_batches = 100, 10, 2, None


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
    assert token and (tmp_path / "resume-token").read_text().strip() == token
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
