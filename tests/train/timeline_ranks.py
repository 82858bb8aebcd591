"""Rank body for the Graph-mode timeline test (spawned processes import it by name)."""

from __future__ import annotations

import io
import tempfile
import traceback
from pathlib import Path

import torch
from torch import nn

import flodl as fl
from tests.train.launched import act_as_launched_rank


def graph_mode_events(rank: int, world: int, port: int, results) -> None:
    """Each rank runs a Timeline around a lockstep Graph-mode epoch and a checkpoint save, and
    another around an El Che epoch; it reports what they recorded, plus the lines its flodl
    logging wrote."""
    act_as_launched_rank(rank, world, port)
    out: dict = {"rank": rank}
    lines = io.StringIO()
    try:
        fl.set_verbosity("info", stream=lines)
        with fl.monitor.Timeline(poll_interval_ms=20, gpu=False) as tl:
            torch.manual_seed(0)
            model = fl.FlowBuilder(nn.Linear(3, 1)).build()
            fl.Trainer.setup(model, None, lambda p: torch.optim.SGD(p, lr=0.05), timeout=30)
            x = torch.randn(32, 3)
            model.set_data_loader(fl.data.DataLoader.from_tensors(x).batch_size(4))
            for (batch,) in model.epoch(0):  # lockstep: one sync per step
                model(batch).pow(2).mean().backward()
                model.step()
            # Each rank saves its own checkpoint: rank 0 blocking, rank 1 in the background.
            saved = Path(tempfile.mkdtemp()) / f"rank{rank}.fdl"
            model.save_checkpoint(saved, background=rank == 1)
            fl.checkpoint.flush()
        events = tl.events
        out["saved_path"] = str(saved)
        out["checkpoints"] = [(e.rank, e.data) for e in events if e.kind == "checkpoint_saved"]
        out["kinds"] = sorted({e.kind for e in events})
        out["syncs"] = [e.data for e in events if e.kind == "sync_end"]
        out["sync_ranks"] = sorted({e.rank for e in events if e.kind.startswith("sync")})
        out["epoch_ends"] = [e.data for e in events if e.kind == "epoch_end"]
        out["samples"] = len(tl.samples)
        out["log"] = lines.getvalue().splitlines()
        # El Che: the anchor starts at one batch per window and grows once a sync's cost is
        # known (one tiny batch computes in far less than 100x a sync), an anchor_changed event.
        with fl.monitor.Timeline(poll_interval_ms=20, gpu=False) as el_che_tl:
            cadenced = fl.FlowBuilder(nn.Linear(3, 1)).build()
            config = fl.DdpConfig(anchor=1, overhead_target=0.01)
            fl.Trainer.setup(cadenced, None, lambda p: torch.optim.SGD(p, lr=0.05), config=config)
            cadenced.set_data_loader(fl.data.DataLoader.from_tensors(x.repeat(2, 1)).batch_size(4))
            for (batch,) in cadenced.epoch(0):
                cadenced(batch).pow(2).mean().backward()
                cadenced.step()
        el_che_events = el_che_tl.events
        out["el_che_syncs"] = [e.data for e in el_che_events if e.kind == "sync_end"]
        out["anchor_changes"] = [
            (e.rank, e.data) for e in el_che_events if e.kind == "anchor_changed"
        ]
        model.finish()
    except BaseException:
        out["error"] = traceback.format_exc()
    finally:
        fl.set_verbosity(None)
    results.put(out)
