"""Rank bodies for the Graph-mode multi-process tests (spawned processes import them by name).

Each rank sets the launcher environment a c10d launcher would, so ``fl.Trainer.setup`` takes the
same path as under torchrun, runs the scenario, and puts its observations on the result queue.
"""

from __future__ import annotations

import traceback

import torch
from torch import nn

import flodl as fl
from tests.train.launched import act_as_launched_rank


def graph() -> fl.Graph:
    return (
        fl.FlowBuilder(nn.Linear(3, 4)).through(nn.BatchNorm1d(4)).through(nn.Linear(4, 1)).build()
    )


def params_of(model: nn.Module) -> list[list[float]]:
    return [t.detach().flatten().tolist() for t in model.state_dict().values()]


def scenario(rank: int, world: int, port: int, results) -> None:
    act_as_launched_rank(rank, world, port)
    out: dict = {"rank": rank}
    try:
        torch.manual_seed(100 + rank)  # different initial weights per rank
        model = graph()
        fl.Trainer.setup(model, None, lambda p: torch.optim.SGD(p, lr=0.1), timeout=20)
        out["world"] = model.world_size
        out["distributed"] = model.is_distributed
        out["after_setup"] = params_of(model)

        # Every sample once across ranks per epoch, equal batch counts, shards change per epoch.
        ids = torch.arange(64, dtype=torch.float32).unsqueeze(1)
        model.set_data_loader(fl.data.DataLoader.from_tensors(ids).batch_size(8))
        out["epochs"] = [
            [int(i) for (batch,) in model.epoch(e) for i in batch.flatten().tolist()]
            for e in range(2)
        ]

        # Rank 1 runs no backward at all: its missing gradients count as zeros, both ranks agree.
        if rank == 0:
            x = torch.linspace(-1, 1, 24).reshape(8, 3)
            model(x).pow(2).mean().backward()
        model.step()
        out["after_step"] = params_of(model)
        out["training_step"] = model.training_step

        # Uneven partition ratios give unequal batch counts: refused on every rank.
        uneven = (
            fl.data.DataLoader.from_tensors(ids)
            .batch_size(8)
            .partition(rank, world, [3, 1])
            .build()
        )
        try:
            model.set_data_loader(uneven)
        except fl.TrainerConfigError as err:
            out["uneven_error"] = str(err)
        model.finish()
        out["finished"] = not torch.distributed.is_initialized()
    except BaseException:
        out["error"] = traceback.format_exc()
    results.put(out)
