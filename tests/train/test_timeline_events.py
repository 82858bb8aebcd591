"""The Trainer's timeline events, in Builder and Graph mode, across two ranks."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import torch
from torch import nn

import flodl as fl
import flodl.checkpoint.background as background
from flodl.checkpoint import listeners
from flodl.monitor import timeline
from flodl.monitor.timeline import _checkpoint_written as checkpoint_written
from tests.train import timeline_ranks, toy
from tests.train.launched import run_launched
from tests.train.test_trainer import builder, two_ranks


def test_single_device_builder_run_emits_epoch_and_checkpoint_events(tmp_path):
    with fl.monitor.Timeline(poll_interval_ms=20, gpu=False) as tl:
        builder().num_epochs(3).checkpoint_every(2, directory=str(tmp_path)).run().join()
    ends = tl.events_of("epoch_end")
    assert [e.data["epoch"] for e in ends] == [0, 1, 2]
    assert all(e.data["loss"] > 0 for e in ends)
    saved = tl.events_of("checkpoint_saved")
    assert [(e.data["version"], e.data["path"]) for e in saved] == [
        (2, str(tmp_path / "checkpoint-0002.fdl"))
    ]
    assert tl.summary().epoch_count == 3 and tl.summary().checkpoint_count == 1


def _graph_mode_model():
    model = fl.FlowBuilder(nn.Linear(3, 1)).build()
    fl.Trainer.setup(model, None, lambda p: torch.optim.SGD(p, lr=0.05))
    for _ in range(2):
        model(torch.randn(4, 3)).pow(2).mean().backward()
        model.step()
    return model


def test_graph_mode_saves_are_checkpoint_events_when_the_file_is_written(tmp_path):
    model = _graph_mode_model()
    gate = threading.Event()
    with fl.monitor.Timeline(poll_interval_ms=20, gpu=False) as tl:
        model.save_checkpoint(tmp_path / "sync.fdl")
        background.default_worker().submit(gate.wait)  # the writer is busy: the save waits
        model.save_checkpoint(tmp_path / "bg.fdl", background=True)
        queued = tl.events_of("checkpoint_saved")
        gate.set()
        fl.checkpoint.flush()
    saved = tl.events_of("checkpoint_saved")
    assert [e.data for e in queued] == [{"path": str(tmp_path / "sync.fdl"), "step": 2}]
    assert [e.data for e in saved] == [
        {"path": str(tmp_path / "sync.fdl"), "step": 2},
        {"path": str(tmp_path / "bg.fdl"), "step": 2},  # when the writer finished, not before
    ]
    assert all(e.rank is None for e in saved) and tl.summary().checkpoint_count == 2


def test_a_stopped_timeline_hears_no_more_saves_and_two_timelines_both_do(tmp_path):
    model = _graph_mode_model()
    first = fl.monitor.Timeline(poll_interval_ms=20, gpu=False).start()
    with fl.monitor.Timeline(poll_interval_ms=20, gpu=False) as second:
        model.save_checkpoint(tmp_path / "a.fdl")
    model.save_checkpoint(tmp_path / "b.fdl")  # only `first` still runs
    first.stop()
    model.save_checkpoint(tmp_path / "c.fdl")  # nobody runs
    paths = [e.data["path"] for e in first.events_of("checkpoint_saved")]
    assert paths == [str(tmp_path / "a.fdl"), str(tmp_path / "b.fdl")]
    assert [e.data["path"] for e in second.events_of("checkpoint_saved")] == paths[:1]
    assert not timeline.active()  # no listener left behind either
    assert checkpoint_written not in listeners._listeners


def save_twice(version, model):
    """A checkpoint function writing two files through flodl."""
    directory = Path(os.environ["FLODL_TEST_CKPT_DIR"])
    for part in ("a", "b"):
        fl.save_checkpoint(directory / f"{part}-{version}.fdl", list(model.named_parameters()))


def save_nothing(version, model):
    """A checkpoint function writing nothing through flodl (e.g. its own format)."""


def test_builder_mode_emits_one_event_per_written_file_never_twice(tmp_path, monkeypatch):
    monkeypatch.setenv("FLODL_TEST_CKPT_DIR", str(tmp_path))
    with fl.monitor.Timeline(poll_interval_ms=20, gpu=False) as tl:
        builder().num_epochs(2).checkpoint_every(1, save_twice).run().join()
    got = [(e.data["version"], e.data["path"]) for e in tl.events_of("checkpoint_saved")]
    assert got == [(v, str(tmp_path / f"{p}-{v}.fdl")) for v in (1, 2) for p in ("a", "b")]
    with fl.monitor.Timeline(poll_interval_ms=20, gpu=False) as tl:
        builder().num_epochs(2).checkpoint_every(1, save_nothing).run().join()
    # Nothing written through flodl: the Trainer tells the timeline itself, once per version.
    got = [e.data for e in tl.events_of("checkpoint_saved")]
    assert got == [{"version": 1, "path": None}, {"version": 2, "path": None}]


def test_no_timeline_no_events_and_nothing_forwarded():
    seen = []
    builder().num_epochs(1).metrics_fn(seen.append).run().join()
    assert seen[0].events == []


@pytest.mark.slow
@pytest.mark.multiproc
def test_builder_mode_two_ranks_forward_their_sync_events(tmp_path):
    with fl.monitor.Timeline(poll_interval_ms=20, gpu=False) as tl:
        run = two_ranks(toy.mse_step, epochs=3, policy=fl.ApplyPolicy.SYNC)
        run.checkpoint_every(1, directory=str(tmp_path)).run().join()
    starts, ends = tl.events_of("sync_start"), tl.events_of("sync_end")
    assert {e.rank for e in starts} == {0, 1} and {e.rank for e in ends} == {0, 1}
    assert all(e.data["mode"] == "builder" and e.data["duration_ms"] >= 0 for e in ends)
    assert [e.data["epoch"] for e in tl.events_of("epoch_end")] == [0, 1, 2]
    # Rank 0 saves after every epoch; the final epoch's save (after its last epoch report)
    # arrives with the rank's exit, once its background write is on disk.
    saved = tl.events_of("checkpoint_saved")
    assert [(e.rank, e.data["version"]) for e in saved] == [(0, 1), (0, 2), (0, 3)]
    assert [e.data["path"] for e in saved] == [
        str(tmp_path / f"checkpoint-{v:04d}.fdl") for v in (1, 2, 3)
    ]
    assert all((tmp_path / f"checkpoint-{v:04d}.fdl").is_file() for v in (1, 2, 3))
    summary = tl.summary()
    assert summary.sync_count == len(starts) and summary.avg_sync_ms >= 0
    times = [e.t_ms for e in tl.events]
    assert times == sorted(times) and times[0] >= 0


@pytest.mark.slow
@pytest.mark.multiproc
def test_builder_mode_el_che_anchor_changes_reach_the_timeline():
    # The anchor starts at one batch per window; a sync costs far more than 1% of one tiny
    # batch, so El Che grows it after the first averaging.
    with fl.monitor.Timeline(poll_interval_ms=20, gpu=False) as tl:
        run = two_ranks(toy.mse_step, epochs=2, policy=fl.ApplyPolicy.CADENCE)
        run.anchor(1).overhead_target(0.01).run().join()
    changes = tl.events_of("anchor_changed")
    assert changes and all(e.rank == 0 for e in changes)  # the coordinator runs in rank 0
    assert changes[0].data["from"] == 1 and changes[0].data["to"] > 1
    assert all(e.data["to"] != e.data["from"] for e in changes)
    assert tl.summary().anchor_change_count == len(changes)


@pytest.mark.slow
@pytest.mark.multiproc
def test_graph_mode_two_ranks_record_syncs_saves_and_anchor_changes_and_log_with_rank_prefixes():
    outs = run_launched(timeline_ranks.graph_mode_events, 2, timeout=120)
    for out in outs:
        rank = out["rank"]
        assert {"sync_start", "sync_end", "epoch_end"} <= set(out["kinds"])
        assert len(out["syncs"]) == 4  # 32 samples / 2 ranks / batch 4: one sync per step
        assert all(s["mode"] == "graph" and s["duration_ms"] >= 0 for s in out["syncs"])
        assert out["sync_ranks"] == [rank]
        assert out["epoch_ends"] == [{"epoch": 0}]
        assert out["samples"] > 0
        # Each rank's own save (rank 1's in the background) is in its own timeline, once.
        assert out["checkpoints"] == [(rank, {"path": out["saved_path"], "step": 4})]
        # El Che: every window ends in a sync; the anchor grew from 1, on both ranks alike.
        assert out["el_che_syncs"] and all(s["mode"] == "graph" for s in out["el_che_syncs"])
        changes = out["anchor_changes"]
        assert changes and all(r == rank and c["to"] != c["from"] for r, c in changes)
        assert changes[0][1]["from"] == 1 and changes[0][1]["to"] > 1
        assert out["log"] and all(line.startswith(f"[rank {rank}] ") for line in out["log"])
        assert any("built graph" in line for line in out["log"])
    # Every rank folds the same all-reduced timings into El Che: the same anchor moves.
    assert [c for _, c in outs[0]["anchor_changes"]] == [c for _, c in outs[1]["anchor_changes"]]
