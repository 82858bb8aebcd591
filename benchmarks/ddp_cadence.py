"""El Che on heterogeneous ranks: samples/s of CADENCE and ASYNC vs SYNC vs one process (same run).

Two CPU ranks (gloo on loopback, one thread each); rank 1 is made 2x slower by an injected sleep in
``train_step`` (20 ms vs 10 ms per batch on top of a small linear-regression step), the way a slow
GPU next to a fast one behaves. Every repetition runs each configuration once, in a rotating order
(interleaved), and the reported figure is the median over repetitions.

Throughput is the training time only: every sample of every epoch divided by the wall time from
the start of epoch 0 (its arrival minus its measured duration) to the last epoch's arrival, so
process spawn and imports do not count (they are in ``wall_s``); El Che's calibration does. The final loss is the MSE of the returned (averaged) model on the whole dataset.

Target (issue #12): CADENCE >= 1.4x SYNC at an equal loss band. On 2 ranks with speeds 1 and 1/2,
the ideal is 1.5x: SYNC partitions equally and waits for the slow rank at every batch, CADENCE gives
the fast rank 2/3 of the samples and averages every ``anchor`` slow-rank batches.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from harness import write_report
from torch import nn

import flodl as fl
from flodl.train import step_context

FAST_MS, SLOW_MS = 10.0, 20.0
TRUE_W = torch.tensor([[2.0, -1.0, 0.5, 3.0, -2.0, 1.0, 0.0, 1.5]])


def regression_data(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, TRUE_W.shape[1], generator=g)
    return x, x @ TRUE_W.T + 0.05 * torch.randn(n, 1, generator=g)


def make_model(device) -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(TRUE_W.shape[1], 1).to(device)


def make_sgd(params) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.02)


def slowed_step(model: nn.Module, batch: list[torch.Tensor]) -> torch.Tensor:
    """Rank 1 takes twice as long per batch as rank 0 (and as the single process)."""
    time.sleep((SLOW_MS if step_context.current().rank == 1 else FAST_MS) / 1e3)
    x, y = batch
    return nn.functional.mse_loss(model(x), y)


def final_loss(state: fl.TrainedState, data) -> float:
    model = state.load_into(make_model("cpu"))
    x, y = data
    with torch.no_grad():
        return float(nn.functional.mse_loss(model(x), y))


def run_once(config: str, data, batch_size: int, epochs: int) -> dict[str, float]:
    arrivals: list[tuple[float, float]] = []
    builder = (
        fl.Trainer.builder(make_model, make_sgd, slowed_step)
        .dataset(data)
        .batch_size(batch_size)
        .num_epochs(epochs)
        .timeout(60)
        .metrics_fn(lambda m: arrivals.append((time.monotonic(), m.epoch_ms / 1e3)))
    )
    if config != "single":
        builder.devices(["cpu", "cpu"]).policy(fl.ApplyPolicy[config.upper()])
    start = time.monotonic()
    state = builder.run().join()
    wall = time.monotonic() - start
    n = data[0].shape[0] // batch_size * batch_size
    training = arrivals[-1][0] - (arrivals[0][0] - arrivals[0][1])
    return {
        "samples_per_s": n * epochs / training,
        "wall_s": wall,
        "loss": final_loss(state, data),
    }


def main(
    n: int = 2048, batch_size: int = 16, epochs: int = 4, repetitions: int = 3
) -> list[dict[str, object]]:
    torch.set_num_threads(1)
    data = regression_data(n)
    configs = ["single", "sync", "cadence", "async"]
    runs: dict[str, list[dict[str, float]]] = {c: [] for c in configs}
    for rep in range(repetitions):
        order = configs[rep % len(configs) :] + configs[: rep % len(configs)]
        for config in order:
            runs[config].append(run_once(config, data, batch_size, epochs))
            print(f"  rep {rep} {config}: {runs[config][-1]}", flush=True)
    med = {c: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for c, rs in runs.items()}
    rows = [
        {
            "config": c,
            "samples_per_s": med[c]["samples_per_s"],
            "vs_sync": med[c]["samples_per_s"] / med["sync"]["samples_per_s"],
            "vs_single": med[c]["samples_per_s"] / med["single"]["samples_per_s"],
            "final_loss": med[c]["loss"],
            "wall_s": med[c]["wall_s"],
        }
        for c in configs
    ]
    notes = (
        f"2 CPU ranks (gloo), rank 1 slowed 2x ({FAST_MS:g} vs {SLOW_MS:g} ms/batch injected), "
        f"{n} samples, batch {batch_size}, {epochs} epochs, default El Che knobs, NCCL-style collective "
        f"backend (gloo all-reduce); median of {repetitions} interleaved repetitions. "
        "samples/s over the training time; wall_s includes spawn and imports. "
        "single = one process at rank 0's speed."
    )
    print(write_report("El Che cadence on heterogeneous ranks", rows, "ddp_cadence", notes))
    for row in rows:
        print(row)
    return rows


if __name__ == "__main__":
    main()
