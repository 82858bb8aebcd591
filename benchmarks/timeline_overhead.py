"""What a running ``fl.monitor.Timeline`` costs a training epoch.

One epoch = 200 steps of a small MLP (forward, backward, SGD) on CPU, one intra-op thread. Cases,
interleaved by the harness, timed in process CPU time (the sampler thread's work is counted):

* ``no timeline`` and ``no timeline (A/A)``: the same epoch twice, the noise floor;
* ``timeline 100 ms``: a Timeline sampling every 100 ms (the default) runs during the epoch and
  receives a sync_start/sync_end pair every 10 steps (a cadence or El Che run averages every
  few batches);
* ``timeline 10 ms``: the same at ten times the default sampling rate;
* ``timeline 100 ms, sync every step``: a pair after every step, as Graph-mode lockstep emits —
  here without the collective a real sync would run, so this is the worst case.

A timeline is started once per run, not per epoch: each round starts it before the timed epoch
and stops it after (both untimed), so the numbers are the cost while it runs.

Usage: ``python benchmarks/timeline_overhead.py [--smoke] [--out DIR]``; ``--smoke`` (one round)
only checks that the script still works (the test suite runs it).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness import Measurement, ratio, write_report

import flodl as fl
from flodl.monitor import timeline

STEPS = 200


def make_epoch(sync_every: int):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.randn(64, 256)

    def epoch() -> None:
        for step in range(STEPS):
            loss = net(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            if step % sync_every == 0:
                timeline.emit("sync_start", mode="graph")
            opt.step()
            if step % sync_every == 0:
                timeline.emit("sync_end", mode="graph", duration_ms=0.0)

    return epoch


def main(rounds: int = 15, out: Path | None = None) -> list[dict[str, object]]:
    torch.set_num_threads(1)
    every10, every1 = make_epoch(10), make_epoch(1)
    polls = {
        "no timeline": (None, every10),
        "no timeline (A/A)": (None, every10),
        "timeline 100 ms": (100, every10),
        "timeline 10 ms": (10, every10),
        "no timeline, every step": (None, every1),
        "timeline 100 ms, sync every step": (100, every1),
    }
    names = list(polls)
    per_round: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds + 1):  # round 0 warms up
        for name in names[r % len(names) :] + names[: r % len(names)]:
            poll, epoch = polls[name]
            tl = None if poll is None else fl.monitor.Timeline(poll_interval_ms=poll).start()
            start = time.process_time()
            epoch()
            elapsed = time.process_time() - start
            if tl is not None:
                tl.stop()
            if r:
                per_round[name].append(elapsed)
    results = {name: Measurement(name, statistics.median(v), v) for name, v in per_round.items()}
    base = {
        name: "no timeline, every step" if "every step" in name else "no timeline" for name in names
    }
    rows: list[dict[str, object]] = [
        {
            "case": name,
            "epoch_ms": m.median_s * 1e3,
            "ratio": ratio(results, name, base[name]),
            "vs": base[name],
        }
        for name, m in results.items()
    ]
    path = write_report(
        "timeline overhead",
        rows,
        "timeline_overhead",
        f"{STEPS}-step CPU epoch of a 256-512-256 MLP (batch 64), one intra-op thread; process CPU "
        f"time (the sampler thread included), median over {rounds} interleaved rounds; "
        "ratio > 1 means slower than without a timeline.",
        results_dir=out,
    )
    print(path.read_text())
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="1 round: checks the script works")
    parser.add_argument("--out", type=Path, help="report directory (default: results/)")
    args = parser.parse_args()
    main(rounds=1 if args.smoke else 15, out=args.out)
