"""Save listeners: told once a checkpoint file is completely written, blocking or background."""

from __future__ import annotations

import doctest
import io
import logging
import threading

import pytest
import torch
from torch import nn

import flodl as fl
import flodl.checkpoint.background as background
from flodl.checkpoint import listeners
from tests.fixtures.failing_saves import path_failing_at_write


@pytest.fixture
def heard():
    """Listener calls as (saved, whether the file was complete then, the calling thread)."""
    calls: list[tuple[listeners.SavedCheckpoint, bool, str]] = []

    def listener(saved: listeners.SavedCheckpoint) -> None:
        try:  # the file must already be whole and readable
            complete = bool(fl.checkpoint_keys(saved.path))
        except Exception:
            complete = False
        calls.append((saved, complete, threading.current_thread().name))

    listeners.add_save_listener(listener)
    yield calls
    listeners.remove_save_listener(listener)
    fl.checkpoint.flush()


def test_docstring_examples():
    result = doctest.testmod(listeners, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_a_blocking_save_tells_listeners_after_the_file_is_written(tmp_path, heard):
    path = tmp_path / "a.fdl"
    fl.save_checkpoint(path, {"w": torch.ones(3)})
    assert len(heard) == 1
    saved, complete, thread = heard[0]
    assert saved == listeners.SavedCheckpoint(str(path), background=False, tags={})
    assert complete and thread == threading.current_thread().name


def test_a_background_save_tells_listeners_from_the_writer_once_written(tmp_path, heard):
    gate = threading.Event()
    background.default_worker().submit(gate.wait)  # the writer is busy: the save stays queued
    path = tmp_path / "b.fdl"
    with listeners.save_tags(version=7) as scope:
        fl.save_checkpoint(path, {"w": torch.ones(3)}, background=True)
    assert heard == [] and scope.saves == 1  # returned; the file is not written yet
    gate.set()
    fl.checkpoint.flush()
    assert len(heard) == 1
    saved, complete, thread = heard[0]
    assert (saved.path, saved.background, saved.tags) == (str(path), True, {"version": 7})
    assert complete and thread == "flodl-checkpoint-writer"


def test_graph_saves_tell_listeners_and_a_set_up_graph_labels_its_step(tmp_path, heard):
    model = fl.FlowBuilder(nn.Linear(2, 1)).build()
    model.save_checkpoint(tmp_path / "plain.fdl")
    fl.Trainer.setup(model, None, lambda p: torch.optim.SGD(p, lr=0.1))
    for _ in range(3):
        model(torch.randn(4, 2)).sum().backward()
        model.step()
    model.save_checkpoint(tmp_path / "sync.fdl")
    model.save_checkpoint(tmp_path / "bg.fdl", background=True)
    fl.checkpoint.flush()
    got = [(s.path, s.background, s.tags, complete) for s, complete, _ in heard]
    assert got == [
        (str(tmp_path / "plain.fdl"), False, {}, True),  # not set up: no step to tell
        (str(tmp_path / "sync.fdl"), False, {"step": 3}, True),
        (str(tmp_path / "bg.fdl"), True, {"step": 3}, True),
    ]


def test_every_checkpoint_writer_tells_listeners_once_its_file_is_written(tmp_path, heard):
    model = nn.Linear(2, 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(3, 2)).sum().backward()
    opt.step()
    fl.save_checkpoint(tmp_path / "old.fdl", {"w": torch.ones(2, 2)})
    heard.clear()
    with listeners.save_tags(version=4) as scope:
        fl.save_training_state(tmp_path / "state.fdl", model, opt, epoch=1, step=2)
        fl.save_optimizer_state(opt, tmp_path / "opt.fdl")
        fl.save_optimizer_state(opt, tmp_path / "opt.rust", format="rust")
        fl.migrate_checkpoint_file(
            tmp_path / "old.fdl", tmp_path / "new.fdl", {"v": torch.zeros(2, 2)}
        )
        fl.fdl_to_safetensors(tmp_path / "new.fdl", tmp_path / "new.safetensors")
        fl.save_training_state(io.BytesIO(), model)  # a stream: nobody is told
        with pytest.raises(fl.CheckpointError):  # a failed save: nobody is told
            fl.save_training_state(tmp_path / "no-dir" / "x.fdl", model)
    names = ["state.fdl", "opt.fdl", "opt.rust", "new.fdl", "new.safetensors"]
    assert [(s.path, s.background, s.tags) for s, _, _ in heard] == [
        (str(tmp_path / name), False, {"version": 4}) for name in names
    ]
    assert [complete for _, complete, _ in heard[:2]] == [True, True]  # whole when told
    assert scope.saves == 6  # the path saves started, the failed one included (no stream)


def test_failed_and_stream_saves_tell_nobody(tmp_path, heard):
    with listeners.save_tags(version=1) as scope:
        fl.save_checkpoint(io.BytesIO(), {"w": torch.ones(1)})
        with pytest.raises(fl.CheckpointError):
            fl.save_checkpoint(tmp_path / "no-dir" / "x.fdl", {"w": torch.ones(1)})
        with path_failing_at_write(tmp_path) as path:
            fl.save_checkpoint(path, {"w": torch.ones(1)}, background=True)
        with pytest.raises(fl.CheckpointError):
            fl.checkpoint.flush()
    assert heard == []
    # The scope counts path saves started (so a caller knows flodl took over the telling),
    # not streams.
    assert scope.saves == 2


def test_nested_scopes_merge_labels_inner_first_and_each_counts(tmp_path, heard):
    with listeners.save_tags(version=1, run="a") as outer:
        with listeners.save_tags(version=2) as inner:
            fl.save_checkpoint(tmp_path / "x.fdl", {"w": torch.ones(1)})
        fl.save_checkpoint(tmp_path / "y.fdl", {"w": torch.ones(1)})
    assert [s.tags for s, _, _ in heard] == [{"version": 2, "run": "a"}, {"version": 1, "run": "a"}]
    assert (outer.saves, inner.saves) == (2, 1)
    fl.save_checkpoint(tmp_path / "z.fdl", {"w": torch.ones(1)})
    assert heard[-1][0].tags == {}  # outside every scope


def test_a_failing_listener_is_logged_and_never_fails_the_save(tmp_path, heard, caplog):
    def broken(saved):
        raise RuntimeError("listener bug")

    listeners.add_save_listener(broken)
    try:
        with caplog.at_level(logging.ERROR, logger="flodl.checkpoint"):
            fl.save_checkpoint(tmp_path / "a.fdl", {"w": torch.ones(1)})
            fl.save_checkpoint(tmp_path / "b.fdl", {"w": torch.ones(1)}, background=True)
            fl.checkpoint.flush()  # the background save does not fail either
    finally:
        listeners.remove_save_listener(broken)
    assert [s.path for s, _, _ in heard] == [str(tmp_path / "a.fdl"), str(tmp_path / "b.fdl")]
    assert sum("listener bug" in r.exc_text for r in caplog.records if r.exc_text) == 2


def test_remove_stops_the_calls_and_bad_listeners_are_refused(tmp_path):
    seen: list[listeners.SavedCheckpoint] = []
    listeners.add_save_listener(seen.append)
    listeners.add_save_listener(seen.append)  # once only
    fl.save_checkpoint(tmp_path / "a.fdl", {"w": torch.ones(1)})
    listeners.remove_save_listener(seen.append)
    listeners.remove_save_listener(seen.append)  # not registered: nothing happens
    fl.save_checkpoint(tmp_path / "b.fdl", {"w": torch.ones(1)})
    assert [s.path for s in seen] == [str(tmp_path / "a.fdl")]
    with pytest.raises(TypeError, match="callable"):
        listeners.add_save_listener("not a function")  # type: ignore[arg-type]
