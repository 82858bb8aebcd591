"""Builder mode's weight on 2 CPU ranks: time to the first step, Python threads per rank.

Each round runs a tiny two-rank job (``.devices(["cpu", "cpu"])``, one thread per rank, SYNC and
CADENCE alternating) and records, from inside ``train_step``, the wall clock of each rank's first
call and the names of the Python threads alive at its last. Reported: the median over rounds of
the time from ``run()`` to the moment both ranks made their first step (process spawn, imports,
group start, model and data building), of the whole run, and the most threads seen per rank.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from harness import write_report
from torch import nn

import flodl as fl

STAMPS = "FLODL_BENCH_STAMPS"


def make_model(device):
    torch.manual_seed(0)
    return nn.Linear(4, 1).to(device)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=0.05)


def train_step(model, batch):
    x, y = batch
    rank = fl.train.current().rank
    stamp = Path(os.environ[STAMPS]) / f"first-{rank}"
    if not stamp.exists():
        stamp.write_text(repr(time.time()))
    names = sorted(t.name for t in threading.enumerate())
    (Path(os.environ[STAMPS]) / f"threads-{rank}").write_text(",".join(names))
    return nn.functional.mse_loss(model(x), y)


def run_once(policy: fl.ApplyPolicy) -> dict[str, float]:
    x = torch.randn(256, 4)
    y = x.sum(1, keepdim=True)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ[STAMPS] = tmp
        started = time.time()
        (
            fl.Trainer.builder(make_model, make_optimizer, train_step)
            .dataset((x, y))
            .batch_size(16)
            .num_epochs(2)
            .devices(["cpu", "cpu"])
            .threads_per_rank(1)
            .policy(policy)
            .run()
            .join()
        )
        wall = time.time() - started
        first = max(float((Path(tmp) / f"first-{r}").read_text()) for r in range(2))
        threads = [len((Path(tmp) / f"threads-{r}").read_text().split(",")) for r in range(2)]
    return {"first_step_s": first - started, "wall_s": wall, "t0": threads[0], "t1": threads[1]}


def main(rounds: int = 6) -> list[dict[str, object]]:
    torch.set_num_threads(1)
    runs = [
        run_once(fl.ApplyPolicy.SYNC if i % 2 == 0 else fl.ApplyPolicy.CADENCE)
        for i in range(rounds)
    ]
    for r in runs:
        print(r, flush=True)
    rows: list[dict[str, object]] = [
        {
            "first_step_s": statistics.median(r["first_step_s"] for r in runs),
            "wall_s": statistics.median(r["wall_s"] for r in runs),
            "rank0_threads": max(int(r["t0"]) for r in runs),
            "rank1_threads": max(int(r["t1"]) for r in runs),
        }
    ]
    notes = (
        f"2 CPU ranks (gloo), 256 samples, batch 16, 2 epochs, one thread per rank; median over "
        f"{rounds} runs alternating SYNC and CADENCE. first_step_s: from run() to both ranks' "
        "first train_step call; threads: Python threads alive in the rank at its last step."
    )
    print(
        write_report(
            "Builder mode start-up and threads (2 CPU ranks)", rows, "builder_startup", notes
        )
    )
    return rows


if __name__ == "__main__":
    main()
