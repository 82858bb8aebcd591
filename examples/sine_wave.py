"""Sine wave regression: learn sin(x) on [-2π, 2π], print predictions next to the truth, and
check that a checkpoint round-trip gives back the same model.

    python examples/sine_wave.py [--out DIR]     # FLODL_SMOKE=1 for a 2-epoch check

- a residual ``FlowBuilder`` with ``LayerNorm``;
- Adam with ``fl.optim.CosineScheduler`` (per epoch);
- ``record_scalar`` + ``end_epoch``, logged by ``fl.Monitor``;
- evaluation under ``torch.no_grad()``;
- ``save_checkpoint`` / ``load_checkpoint`` (the safe ``.fdl`` format, no pickle).
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
from torch import nn

import flodl as fl

EPOCHS = fl.smoke.SMOKE_EPOCHS if fl.smoke.smoke_enabled() else 300


def build_model() -> fl.Graph:
    return (
        fl.FlowBuilder(nn.Linear(1, 64))
        .through(nn.GELU())
        .also(nn.Sequential(nn.Linear(64, 64), nn.GELU()))  # residual block
        .through(nn.LayerNorm(64))
        .through(nn.Linear(64, 1))
        .build()
    )


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("example-output/sine_wave"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    fl.manual_seed(0)
    x = torch.linspace(-2 * math.pi, 2 * math.pi, 512).unsqueeze(1)
    y = torch.sin(x)
    model = build_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    schedule = fl.optim.CosineScheduler(3e-3, 1e-5, EPOCHS)
    monitor = fl.Monitor(EPOCHS)
    for epoch in range(EPOCHS):
        began = time.perf_counter()
        fl.optim.set_lr(optimizer, schedule.lr(epoch))
        for batch in torch.randperm(len(x)).split(64):
            loss = nn.functional.mse_loss(model(x[batch]), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            model.record_scalar("loss", loss)
        model.record_scalar("lr", schedule.lr(epoch))
        model.end_epoch()
        monitor.log(epoch, time.perf_counter() - began, model)
    monitor.finish()

    model.eval()
    probe = torch.linspace(-2 * math.pi, 2 * math.pi, 9).unsqueeze(1)
    with torch.no_grad():
        predicted = model(probe)
    print(f"\n{'x':>8} {'sin(x)':>9} {'model':>9} {'error':>8}")
    for xi, pi in zip(probe.squeeze(1).tolist(), predicted.squeeze(1).tolist(), strict=True):
        print(f"{xi:8.3f} {math.sin(xi):9.4f} {pi:9.4f} {abs(pi - math.sin(xi)):8.4f}")
    with torch.no_grad():
        mse = nn.functional.mse_loss(model(x), y).item()
    print(f"mse over [-2π, 2π]: {mse:.5f}")

    path = args.out / "sine.fdl"
    model.save_checkpoint(path)
    restored = build_model()  # fresh random weights, same architecture
    report = restored.load_checkpoint(path)
    restored.eval()
    with torch.no_grad():
        same = torch.equal(restored(probe), predicted)
    print(f"checkpoint {path}: {len(report.loaded)} tensors loaded, identical output: {same}")
    if not same:
        raise SystemExit("checkpoint round-trip changed the model")
    return mse


if __name__ == "__main__":
    main()
