"""The Trainer's timeline events, in Builder and Graph mode, across two ranks."""

from __future__ import annotations

import pytest

import flodl as fl
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
    # Rank 0 saves; its events ride along with the next epoch's metrics.
    assert {e.data["version"] for e in tl.events_of("checkpoint_saved")} >= {1}
    assert all(e.rank == 0 for e in tl.events_of("checkpoint_saved"))
    summary = tl.summary()
    assert summary.sync_count == len(starts) and summary.avg_sync_ms >= 0
    times = [e.t_ms for e in tl.events]
    assert times == sorted(times) and times[0] >= 0


@pytest.mark.slow
@pytest.mark.multiproc
def test_graph_mode_two_ranks_record_their_syncs_and_log_with_rank_prefixes():
    outs = run_launched(timeline_ranks.graph_mode_events, 2, timeout=120)
    for out in outs:
        rank = out["rank"]
        assert {"sync_start", "sync_end", "epoch_end"} <= set(out["kinds"])
        assert len(out["syncs"]) == 4  # 32 samples / 2 ranks / batch 4: one sync per step
        assert all(s["mode"] == "graph" and s["duration_ms"] >= 0 for s in out["syncs"])
        assert out["sync_ranks"] == [rank]
        assert out["epoch_ends"] == [{"epoch": 0}]
        assert out["samples"] > 0
        assert out["log"] and all(line.startswith(f"[rank {rank}] ") for line in out["log"])
        assert any("built graph" in line for line in out["log"])
