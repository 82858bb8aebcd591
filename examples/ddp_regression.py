"""Train a tiny regression with fl.Trainer — on one device, on two CPU ranks, or under torchrun.

    python examples/ddp_regression.py                  # one device, in-process
    python examples/ddp_regression.py --ranks 2        # two CPU processes (gloo on loopback)
    torchrun --standalone --nproc-per-node 2 examples/ddp_regression.py   # same code, launched

Every rank prints the same final loss and parameter checksum: the averaged model.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import flodl as fl


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1024, 8, generator=g)
    w = torch.linspace(-2, 2, 8).unsqueeze(1)
    return x, x @ w + 0.01 * torch.randn(1024, 1, generator=g)


def make_model(device) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)).to(device)


def make_optimizer(params) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=1e-2)


def train_step(model: nn.Module, batch: fl.data.Batch) -> torch.Tensor:
    x, y = batch
    return nn.functional.mse_loss(model(x), y)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=1, help="CPU ranks when not under torchrun")
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    builder = (
        fl.Trainer.builder(make_model, make_optimizer, train_step)
        .dataset(make_data)
        .batch_size(32)
        .num_epochs(args.epochs)
        .policy(fl.ApplyPolicy.CADENCE)
    )
    if args.ranks > 1:
        builder.devices(["cpu"] * args.ranks)
    handle = builder.run()
    for metrics in iter(handle.next_metrics, None):  # epochs as they are aggregated (rank 0)
        print(
            f"epoch {metrics.epoch}: loss {metrics.avg_loss:.4f} batches {metrics.per_rank_batches}"
        )
    state = handle.join()
    model = state.load_into(make_model("cpu"))
    x, y = make_data()
    with torch.no_grad():
        loss = nn.functional.mse_loss(model(x), y).item()
    checksum = sum(float(p.sum()) for p in state.params)
    print(
        f"rank {fl.train.current().rank}: world {handle.world_size} loss {loss:.4f} checksum {checksum:.6f}"
    )


if __name__ == "__main__":
    main()
