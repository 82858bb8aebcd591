"""Graph mode: your own training loop, on one device or on every rank of a torchrun job.

    python examples/graph_ddp.py                                        # one device (or every GPU)
    python examples/graph_ddp.py --devices cpu,cpu                      # two ranks, no launcher
    torchrun --standalone --nproc-per-node 2 examples/graph_ddp.py      # two ranks, same code
    torchrun --standalone --nproc-per-node 2 examples/graph_ddp.py --verify
    torchrun --standalone --nproc-per-node 2 examples/graph_ddp.py --el-che --slow-rank 1

Without a launcher, ``Trainer.setup`` starts the other ranks itself when it has two or more
devices (every GPU found, or ``--devices``): it runs this command line again once per other
device, and this process becomes rank 0.

Every rank runs this whole script on its own shard of the data; ``model.step()`` averages the
gradients, so every rank prints the same parameter digest. ``--verify`` first checks numerically
that the averaged gradient of two half batches equals the full-batch gradient.

``--el-che`` turns on El Che (on by itself when the ranks' GPUs differ): every rank reads the
whole epoch order and takes its share of each window, a faster rank more batches than a slower
one. ``--slow-rank R`` makes rank R take 3 ms more per batch, as a weaker GPU would (this tiny
model's own forward and backward take a fraction of a millisecond).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import os
import time

import torch
from torch import nn

import flodl as fl

SLOW_RANK_S = 0.003  # --slow-rank's extra time per batch


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1024, 8, generator=g)
    return x, x @ torch.linspace(-2, 2, 8).unsqueeze(1) + 0.01 * torch.randn(1024, 1, generator=g)


def make_model() -> fl.Graph:
    return (
        fl.FlowBuilder(nn.Linear(8, 16))
        .through(nn.Tanh())
        .through(nn.BatchNorm1d(16))  # a buffer: synced from rank 0 at every step
        .through(nn.Linear(16, 1))
        .build()
    )


def digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def full_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        loss = nn.functional.mse_loss(model(x.to(model.device)), y.to(model.device)).item()
    model.train()
    return loss


def verify_gradient_averaging(model: fl.Graph, x: torch.Tensor, y: torch.Tensor) -> float:
    """Max |averaged shard gradient − full-batch gradient| on a fixed batch of 64."""
    probe = copy.deepcopy(model)  # a copy is not set up: give it a session with no optimizer
    fl.Trainer.setup(probe, None, None)  # its step() only averages gradients
    reference = copy.deepcopy(probe)  # rank 0's parameters, as every rank now holds
    batch_x, batch_y = x[:64].to(probe.device), y[:64].to(probe.device)
    probe.eval(), reference.eval()  # no batch statistics: shard and full batch see the same model
    nn.functional.mse_loss(reference(batch_x), batch_y).backward()
    size = 64 // probe.world_size
    part = slice(probe.rank * size, (probe.rank + 1) * size)  # this rank's half of the batch
    nn.functional.mse_loss(probe(batch_x[part]), batch_y[part]).backward()
    probe.step()
    return max(
        (a.grad - b.grad).abs().max().item()
        for a, b in zip(probe.parameters(), reference.parameters(), strict=True)
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--verify", action="store_true")
    parser.add_argument("--el-che", action="store_true", help="per-rank batch counts (El Che)")
    parser.add_argument(
        "--slow-rank", type=int, default=None, help="this rank takes 3 ms more per batch"
    )
    parser.add_argument(
        "--devices", default=None, help="comma-separated, e.g. cpu,cpu or cuda:0,cuda:1"
    )
    args = parser.parse_args()

    torch.manual_seed(int(os.environ.get("RANK", "0")))  # differs per rank on purpose
    model = make_model()
    fl.Trainer.setup(
        model,
        None,
        lambda params: torch.optim.Adam(params, lr=1e-2),
        scheduler=fl.optim.MultiStepLR(1e-2, [40, 80], 0.5),
        config=fl.DdpConfig() if args.el_che else None,
        devices=args.devices.split(",") if args.devices else None,
    )  # rank 0's initial parameters are now on every rank
    rank = model.rank
    x, y = make_data()
    if args.verify:
        print(
            f"rank {rank}: gradient check max abs diff {verify_gradient_averaging(model, x, y):.3e}",
            flush=True,
        )

    # This rank's shard (with El Che: the whole epoch order, shared out window by window).
    model.set_data_loader(fl.data.DataLoader.from_tensors(x, y).batch_size(32))
    start = full_loss(model, x, y)
    batches = 0
    for epoch in range(args.epochs):
        for inputs, targets in model.epoch(epoch):
            loss = nn.functional.mse_loss(model(inputs), targets)  # this rank's batches only
            loss.backward()
            if rank == args.slow_rank:  # a weaker device; a fixed cost, so load cannot hide it
                time.sleep(SLOW_RANK_S)
            batches += 1
            model.step()  # average gradients, sync buffers, scheduled LR, optimizer step
    end = full_loss(model, x, y)
    model.finish()  # wait for every rank, release the process group
    print(
        f"rank {rank}: world {model.world_size} steps {model.training_step} batches {batches} "
        f"loss {start:.4f} -> {end:.4f} digest {digest(model)}",
        flush=True,
    )


if __name__ == "__main__":
    main()
