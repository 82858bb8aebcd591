"""Learning-rate schedules that compose: linear warmup into cosine annealing, with a plateau
scheduler as a reactive fallback that lowers the rate when the validation loss stops improving.

    python examples/schedulers.py     # FLODL_SMOKE=1 for a 2-epoch check

- ``fl.optim.WarmupScheduler(fl.optim.CosineScheduler(...), target_lr, warmup_steps)``: a pure
  function of the step (``lr(step)``), so a resumed run gets exactly the same rates;
- ``fl.optim.PlateauScheduler``: ``observe(val_loss)`` returns its rate, reduced by ``factor``
  after ``patience`` epochs without improvement;
- the effective rate is the smaller of the two, applied with ``fl.optim.set_lr``.
"""

from __future__ import annotations

import time

import torch
from torch import nn

import flodl as fl

EPOCHS = fl.smoke.SMOKE_EPOCHS if fl.smoke.smoke_enabled() else 80
PEAK = 1e-2


def main() -> list[float]:
    fl.manual_seed(0)
    warm = max(1, EPOCHS // 10)
    schedule = fl.optim.WarmupScheduler(
        fl.optim.CosineScheduler(PEAK, PEAK * 1e-2, EPOCHS - warm),
        target_lr=PEAK,
        warmup_steps=warm,
    )
    print("the planned schedule (epoch: lr):")
    marks = sorted({0, warm - 1, warm, EPOCHS // 2, EPOCHS - 1})
    print("  " + "  ".join(f"{e}: {schedule.lr(e):.2e}" for e in marks))

    model = fl.FlowBuilder(nn.Linear(4, 64)).through(nn.GELU()).through(nn.Linear(64, 1)).build()
    x, x_val = torch.randn(512, 4), torch.randn(128, 4)
    y, y_val = x.pow(2).sum(1, keepdim=True), x_val.pow(2).sum(1, keepdim=True)
    y += 0.5 * torch.randn_like(y)  # noise: the validation loss stops improving at some point
    y_val += 0.5 * torch.randn_like(y_val)
    optimizer = torch.optim.Adam(model.parameters(), lr=PEAK)
    plateau = fl.optim.PlateauScheduler(PEAK, patience=6, factor=0.5, min_lr=1e-6)
    monitor = fl.Monitor(EPOCHS)
    applied = []
    for epoch in range(EPOCHS):
        began = time.perf_counter()
        lr = min(schedule.lr(epoch), plateau.lr(epoch))  # planned, unless the plateau cut it
        fl.optim.set_lr(optimizer, lr)
        applied.append(lr)
        for batch in torch.randperm(len(x)).split(64):
            loss = nn.functional.mse_loss(model(x[batch]), y[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            model.record_scalar("loss", loss)
        with torch.no_grad():
            val_loss = nn.functional.mse_loss(model(x_val), y_val).item()
        plateau.observe(val_loss)  # reactive: lowers its rate after `patience` bad epochs
        model.record_scalar("val_loss", val_loss)
        model.record_scalar("lr", lr)
        model.end_epoch()
        monitor.log(epoch, time.perf_counter() - began, model)
    monitor.finish()
    cut = sum(1 for a, e in zip(applied, range(EPOCHS), strict=True) if a < schedule.lr(e))
    print(f"the plateau scheduler lowered the planned rate in {cut} of {EPOCHS} epochs "
          f"(now {plateau.lr(0):.2e})")  # fmt: skip
    return applied


if __name__ == "__main__":
    main()
