"""Mixed precision: train under autocast with a GradScaler, then export half-size weights.

    python examples/mixed_precision.py [--out DIR]   # FLODL_SMOKE=1 for a 2-epoch check

- ``torch.autocast`` reaches every step of a graph (a graph is a normal ``nn.Module``): on a GPU
  float16, on a CPU bfloat16; losses and norms stay float32, the weights stay float32;
- ``torch.amp.GradScaler``: ``scale`` before backward, ``unscale_`` before clipping, ``step``
  (skipped when a gradient is inf/NaN), ``update`` after every step;
- ``fl.cast_parameters``: a bfloat16 copy of the weights for export (half the bytes), loaded
  back into a float32 model.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch import nn

import flodl as fl

EPOCHS = fl.smoke.SMOKE_EPOCHS if fl.smoke.smoke_enabled() else 60


def build_model() -> fl.Graph:
    return (
        fl.FlowBuilder(nn.Linear(16, 64))
        .through(nn.GELU())
        .also(nn.Linear(64, 64))
        .tag("hidden")
        .through(nn.LayerNorm(64))  # autocast keeps normalisation in float32
        .through(nn.Linear(64, 1))
        .build()
    )


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("example-output/mixed_precision"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    fl.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    half = torch.float16 if device == "cuda" else torch.bfloat16
    model = build_model().to(device)
    x = torch.randn(1024, 16, device=device)
    y = (x[:, :8].sum(1, keepdim=True) - x[:, 8:].pow(2).mean(1, keepdim=True)).tanh()
    optimizer = fl.optim.AdamW(model.parameters(), lr=3e-3)
    scaler = torch.amp.GradScaler(device)
    monitor = fl.Monitor(EPOCHS)
    for epoch in range(EPOCHS):
        began = time.perf_counter()
        for batch in torch.randperm(len(x), device=device).split(128):
            with torch.autocast(device, dtype=half):
                loss = nn.functional.mse_loss(model(x[batch]).float(), y[batch])
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)  # clip the real gradients, not the scaled ones
            fl.optim.clip_grad_norm(model, 1.0)
            scaler.step(optimizer)
            scaler.update()
            model.record_scalar("loss", loss)
        model.record_scalar("scale", scaler.get_scale())
        model.end_epoch()
        monitor.log(epoch, time.perf_counter() - began, model)
    monitor.finish()
    print(f"autocast ran the block in {model.tagged('hidden').dtype}; weights are {half} "
          f"only when cast: {next(model.parameters()).dtype}")  # fmt: skip

    # Export: the weights in bfloat16 (half the bytes), then back into a float32 model.
    with torch.no_grad():
        reference = model(x)  # the float32 model's predictions
    full = args.out / "model-fp32.fdl"
    model.save_checkpoint(full)
    changed = fl.cast_parameters(model, torch.bfloat16)
    small = args.out / "model-bf16.fdl"
    model.save_checkpoint(small)
    print(f"cast {changed} parameters to bfloat16: {full.stat().st_size} -> "
          f"{small.stat().st_size} bytes")  # fmt: skip
    restored = build_model().to(device)
    restored.load_checkpoint(small)  # loads convert to the model's dtype
    with torch.no_grad():
        gap = (restored(x) - reference).abs().max().item()
        mse = nn.functional.mse_loss(restored(x), y).item()
    print(
        f"bf16 export in a float32 model vs the original: max difference {gap:.4f}; mse {mse:.4f}"
    )
    return mse


if __name__ == "__main__":
    main()
