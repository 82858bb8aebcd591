"""Observation and early stopping: tag graph nodes, collect per-batch metrics, flush them into
epoch histories, and stop when the trends say training has converged.

    python examples/observation.py [--out DIR]   # FLODL_SMOKE=1 for a 2-epoch check

- ``tag`` names values inside the graph; ``collect(tag)`` records their mean per batch;
- ``record_scalar`` records numbers computed outside the graph (loss, gradient norm);
- ``end_epoch`` flushes every per-batch buffer into its epoch history;
- ``trend(name)``: ``slope``, ``improving``, ``stalled``, ``converged``; ``trends(...)``:
  ``all_improving``, ``any_stalled``, ``mean_slope``;
- early stopping once the validation loss has converged; ``plot_html`` for the curves.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch import nn

import flodl as fl

SMOKE = fl.smoke.smoke_enabled()
MAX_EPOCHS = fl.smoke.SMOKE_EPOCHS if SMOKE else 300
WINDOW = 5


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("example-output/observation"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    fl.manual_seed(0)
    model = (
        fl.FlowBuilder(nn.Linear(6, 32))
        .through(nn.GELU())
        .tag("hidden")  # observed: the mean activation
        .also(nn.Linear(32, 32))
        .through(nn.LayerNorm(32))
        .tag("normed")
        .through(nn.Linear(32, 1))
        .tag("prediction")
        .build()
    )
    x, x_val = torch.randn(512, 6), torch.randn(256, 6)
    w = torch.randn(6, 1)
    y, y_val = (x @ w).sin(), (x_val @ w).sin()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    monitor = fl.Monitor(MAX_EPOCHS)
    stopped_at = MAX_EPOCHS
    for epoch in range(MAX_EPOCHS):
        began = time.perf_counter()
        for batch in torch.randperm(len(x)).split(64):
            loss = nn.functional.mse_loss(model(x[batch]), y[batch])
            optimizer.zero_grad()
            loss.backward()
            grad_norm = fl.optim.clip_grad_norm(model.parameters(), 5.0)
            optimizer.step()
            model.collect("hidden", "normed")  # the mean of each tagged value, this batch
            model.record_scalar("loss", loss)
            model.record_scalar("grad_norm", grad_norm)
        with torch.no_grad():
            model.record_scalar("val_loss", nn.functional.mse_loss(model(x_val), y_val))
        model.end_epoch()  # every buffer -> one value in its epoch history
        monitor.log(epoch, time.perf_counter() - began, model)

        val = model.trend("val_loss")
        if len(val) >= WINDOW and val.converged(window=WINDOW, tol=1e-7):
            stopped_at = epoch + 1
            print(f"early stop after epoch {stopped_at}: val_loss converged "
                  f"(slope {val.slope(WINDOW):.2e} over the last {WINDOW})")  # fmt: skip
            break
    monitor.finish()

    losses = model.trends("loss", "val_loss")
    print(f"loss and val_loss improving over the run: {losses.all_improving()}; "
          f"mean slope {losses.mean_slope():.4f}")  # fmt: skip
    hidden = model.trend("hidden")
    print(f"mean hidden activation: first {hidden.values[0]:.4f}, last {hidden.last():.4f}, "
          f"stalled over {WINDOW}: {len(hidden) >= WINDOW and hidden.stalled(WINDOW, 1e-3)}")  # fmt: skip
    curves = args.out / "curves.html"
    model.plot_html(curves)
    print(f"curves: {curves}; epochs run: {stopped_at}")
    return stopped_at


if __name__ == "__main__":
    main()
