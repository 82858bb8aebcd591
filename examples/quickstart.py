"""Quickstart: build, train and monitor a model with a residual connection.

    python examples/quickstart.py            # FLODL_SMOKE=1 for a 2-epoch check

- ``fl.FlowBuilder(...).through(...).also(...).build()`` — a graph, a normal ``nn.Module``;
- Adam with gradient clipping;
- graph observation: ``record_scalar`` per batch, ``end_epoch`` per epoch;
- ``fl.Monitor``: one line per epoch, read straight from the graph's latest metrics.
"""

from __future__ import annotations

import time

import torch
from torch import nn

import flodl as fl

EPOCHS = fl.smoke.SMOKE_EPOCHS if fl.smoke.smoke_enabled() else 100


def main() -> float:
    fl.manual_seed(0)
    model = (
        fl.FlowBuilder(nn.Linear(2, 32))
        .through(nn.GELU())
        .through(nn.LayerNorm(32))
        .also(nn.Linear(32, 32))  # residual: x + Linear(x)
        .tag("features")
        .through(nn.Linear(32, 1))
        .build()
    )
    x = torch.randn(256, 2)
    y = (x[:, :1] * x[:, 1:]).sin()  # something a straight line cannot fit
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    monitor = fl.Monitor(EPOCHS)
    for epoch in range(EPOCHS):
        began = time.perf_counter()
        for batch in torch.randperm(256).split(32):
            loss = nn.functional.mse_loss(model(x[batch]), y[batch])
            optimizer.zero_grad()
            loss.backward()
            fl.optim.clip_grad_norm(model.parameters(), 1.0)
            optimizer.step()
            model.record_scalar("loss", loss)  # per batch; averaged at the end of the epoch
        model.end_epoch()
        monitor.log(epoch, time.perf_counter() - began, model)  # the graph's latest metrics
    monitor.finish()
    final = model.trend("loss").last()
    print(f"features of the last batch: {tuple(model.tagged('features').shape)}")
    print(f"final loss {final:.4f} (first epoch {model.trend('loss').values[0]:.4f})")
    return final


if __name__ == "__main__":
    main()
