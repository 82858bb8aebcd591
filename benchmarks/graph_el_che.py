"""El Che in Graph mode (your loop, ``model.step()``) vs lockstep, on heterogeneous ranks.

Two CPU ranks as torchrun would start them (gloo on loopback, one thread each); rank 1 is made
2x slower by an injected sleep per batch (20 ms vs 10 ms on top of a small linear-regression
step). Each configuration trains the same epochs of the same data:

- ``lockstep``: ``fl.DdpConfig(max_anchor=0)``: equal shards, every batch synced (the slow rank
  sets the pace of both).
- ``el_che``: ``fl.DdpConfig(average="grads")``: each window gives the fast rank about twice
  the slow rank's batches, one sync and one optimizer step per window (gradients averaged, as the
  Rust flodl's El Che does).
- ``el_che_params``: ``fl.DdpConfig()`` (``average="params"``, the default): the same windows,
  but every batch steps its rank's optimizer and the window ends with the count-weighted mean of
  the parameters.

samples/s is every sample trained divided by rank 0's loop time (after setup, which includes a
collective, so both ranks start together); the final loss is the MSE of the trained model on the
whole dataset. Configurations alternate over repetitions (interleaved); medians reported.

Expected: El Che ~1.5x lockstep's throughput (ideal for speeds 1 and 1/2). Averaging gradients
takes one optimizer step per window instead of one per batch, so at equal epochs its loss is far
higher (it is a large-batch method); averaging parameters keeps a step
per batch and should reach lockstep's loss band. See docs/ddp.md.
"""

from __future__ import annotations

import os
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from ddp_cadence import FAST_MS, SLOW_MS, TRUE_W, regression_data  # the same task and slowdown
from harness import write_report
from torch import nn

import flodl as fl


def rank_body(rank: int, port: int, config: str, n: int, bs: int, epochs: int, out) -> None:
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
    )  # fmt: skip
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = fl.FlowBuilder(nn.Linear(TRUE_W.shape[1], 1)).build()
    ddp = {
        "lockstep": fl.DdpConfig(max_anchor=0),
        "el_che": fl.DdpConfig(average="grads"),
        "el_che_params": fl.DdpConfig(average="params"),
    }[config]
    fl.Trainer.setup(model, None, lambda p: torch.optim.SGD(p, lr=0.02), config=ddp)
    x, y = regression_data(n)
    model.set_data_loader(fl.data.DataLoader.from_tensors(x, y).batch_size(bs))
    samples = 0
    start = time.perf_counter()
    for epoch in range(epochs):
        for inputs, targets in model.epoch(epoch):
            time.sleep((SLOW_MS if rank == 1 else FAST_MS) / 1e3)
            nn.functional.mse_loss(model(inputs), targets).backward()
            samples += inputs.shape[0]
            model.step()
    seconds = time.perf_counter() - start
    with torch.no_grad():
        loss = nn.functional.mse_loss(model(x), y).item()
    steps = model.training_step
    model.finish()
    out.put({"rank": rank, "samples": samples, "seconds": seconds, "loss": loss, "steps": steps})


def run_once(config: str, n: int, bs: int, epochs: int) -> dict[str, float]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = torch.multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=rank_body, args=(r, port, config, n, bs, epochs, out), daemon=True)
        for r in range(2)
    ]
    for p in procs:
        p.start()
    ranks = sorted((out.get(timeout=300) for _ in procs), key=lambda r: r["rank"])
    for p in procs:
        p.join(timeout=30)
    total = sum(r["samples"] for r in ranks)
    return {
        "samples_per_s": total / ranks[0]["seconds"],
        "loss": ranks[0]["loss"],
        "steps": ranks[0]["steps"],
        "fast_share": ranks[0]["samples"] / total,
    }


def main(
    n: int = 2048, batch_size: int = 16, epochs: int = 2, repetitions: int = 3
) -> list[dict[str, object]]:
    smoke = "--smoke" in sys.argv
    if smoke:
        n, epochs, repetitions = 256, 1, 1
    configs = ["lockstep", "el_che", "el_che_params"]
    runs: dict[str, list[dict[str, float]]] = {c: [] for c in configs}
    for rep in range(repetitions):
        for config in configs[rep % 3 :] + configs[: rep % 3]:
            runs[config].append(run_once(config, n, batch_size, epochs))
            print(f"  rep {rep} {config}: {runs[config][-1]}", flush=True)
    med = {c: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for c, rs in runs.items()}
    rows = [
        {
            "config": c,
            "samples_per_s": med[c]["samples_per_s"],
            "vs_lockstep": med[c]["samples_per_s"] / med["lockstep"]["samples_per_s"],
            "fast_rank_share": med[c]["fast_share"],
            "optimizer_steps": med[c]["steps"],
            "final_loss": med[c]["loss"],
        }
        for c in configs
    ]
    notes = (
        f"Graph mode (fl.Trainer.setup + model.step()), 2 CPU ranks (gloo) as torchrun starts "
        f"them, rank 1 slowed 2x ({FAST_MS:g} vs {SLOW_MS:g} ms/batch injected), {n} samples, "
        f"batch {batch_size}, {epochs} epochs, SGD lr 0.02; median of {repetitions} interleaved "
        "repetitions. el_che averages gradients (one optimizer step per window, hence the higher "
        "loss at equal epochs); el_che_params averages parameters (local SGD, a step per batch)."
    )
    if not smoke:
        print(write_report("El Che in Graph mode vs lockstep", rows, "graph_el_che", notes))
    for row in rows:
        print(row)
    return rows


if __name__ == "__main__":
    main()
