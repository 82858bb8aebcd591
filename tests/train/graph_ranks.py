"""Rank bodies for the Graph-mode multi-process tests (spawned processes import them by name).

Each rank sets the launcher environment a c10d launcher would, so ``fl.Trainer.setup`` takes the
same path as under torchrun, runs the scenario, and puts its observations on the result queue.
"""

from __future__ import annotations

import copy
import hashlib
import time
import traceback
import warnings

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
        out["has_el_che"] = model.has_el_che  # same device kind on both ranks: lockstep
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


def el_che_scenario(rank: int, world: int, port: int, results, average: str = "gradients") -> None:
    """El Che in Graph mode: rank 1 is 3x slower per batch (an injected sleep)."""
    act_as_launched_rank(rank, world, port)
    out: dict = {"rank": rank}
    try:
        torch.manual_seed(7)
        model = graph()
        lr = 0.05
        config = fl.DdpConfig(speed_hint=(1, 2.0), average=average)
        session = fl.Trainer.setup(
            model, None, lambda p: torch.optim.SGD(p, lr=lr), config=config, timeout=30
        )
        out["has_el_che"] = model.has_el_che
        out["first_counts"] = list(model.el_che.batch_counts)
        n = 800
        g = torch.Generator().manual_seed(3)
        x = torch.randn(n, 3, generator=g)
        y = x @ torch.tensor([[1.0], [-2.0], [0.5]])
        ids = torch.arange(n)
        model.set_data_loader(fl.data.DataLoader.from_tensors(x=x, y=y, id=ids).batch_size(4))
        loss_fn = nn.functional.mse_loss
        out["loss_before"] = loss_fn(model(x), y).item()

        seen, first_window = [], None
        before = [p.detach().clone() for p in model.parameters()]
        for batch in model.epoch(0):
            seen += batch["id"].tolist()
            loss_fn(model(batch["x"]), batch["y"]).backward()
            time.sleep(0.012 if rank == 1 else 0.004)
            grads = [p.grad.clone() for p in model.parameters()]
            model.step()
            if first_window is None and model.training_step == 1:
                first_window = grads  # this rank's summed gradients of the first window
                after = [p.detach().clone() for p in model.parameters()]
                out["first_update"] = [
                    ((b - a) / lr).flatten().tolist() for b, a in zip(before, after, strict=True)
                ]
                out["first_grad_sum"] = [gr.flatten().tolist() for gr in grads]
        out["seen"] = seen
        out["history"] = list(session.cadence.history)
        out["steps"] = model.training_step
        out["batches"] = len(seen) // 4
        out["loss_after"] = loss_fn(model(x), y).item()

        # Both ranks leave epoch 1 after 3 batches: what ran is synced, not dropped or hung.
        steps = model.training_step
        for i, batch in enumerate(model.epoch(1)):
            loss_fn(model(batch["x"]), batch["y"]).backward()
            if i == 2:
                break
            model.step()
        out["steps_after_break"] = model.training_step - steps

        # A step outside model.epoch(): El Che turns off (on every rank alike), lockstep goes on.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loss_fn(model(x[:8]), y[:8]).backward()
            model.step()
        out["off_warning"] = [str(w.message) for w in caught]
        out["has_el_che_after"] = model.has_el_che
        out["digest"] = hashlib.sha256(
            b"".join(t.detach().numpy().tobytes() for t in model.state_dict().values())
        ).hexdigest()[:16]
        model.finish()
    except BaseException:
        out["error"] = traceback.format_exc()
    results.put(out)


def warm_up_scenario(rank: int, world: int, port: int, results) -> None:
    """El Che in Graph mode where rank 1's first batch takes 1 s (a device's start) and every
    other batch, on both ranks, 4 ms."""
    act_as_launched_rank(rank, world, port)
    out: dict = {"rank": rank}
    try:
        torch.manual_seed(7)
        model = graph()
        config = fl.DdpConfig()  # a config turns El Che on (the devices do not differ)
        fl.Trainer.setup(
            model, None, lambda p: torch.optim.SGD(p, lr=0.05), config=config, timeout=30
        )
        out["has_el_che"] = model.has_el_che
        x = torch.randn(400, 3, generator=torch.Generator().manual_seed(3))
        y = x.sum(1, keepdim=True)
        model.set_data_loader(fl.data.DataLoader.from_tensors(x=x, y=y).batch_size(4))
        first = True
        for batch in model.epoch(0):
            nn.functional.mse_loss(model(batch["x"]), batch["y"]).backward()
            time.sleep(1.0 if rank == 1 and first else 0.004)
            first = False
            model.step()
        out["counts"] = list(model.el_che.batch_counts)
        model.finish()
    except BaseException:
        out["error"] = traceback.format_exc()
    results.put(out)


def balance_scenario(rank: int, world: int, port: int, results) -> None:
    """The auto-balancer on two CPU ranks (forced with ``balance=True``): first a step on shares
    from a speed hint, checked against the full-batch gradient; then rank 1 made 3x slower."""
    act_as_launched_rank(rank, world, port)
    out: dict = {"rank": rank}
    try:
        torch.manual_seed(7)
        model = fl.FlowBuilder(nn.Linear(3, 4)).through(nn.Tanh()).through(nn.Linear(4, 1)).build()
        reference = copy.deepcopy(model)
        config = fl.DdpConfig(max_anchor=0, balance=True, speed_hint=(1, 3.0))
        fl.Trainer.setup(model, None, lambda p: torch.optim.SGD(p, lr=0.1), config=config)
        g = torch.Generator().manual_seed(3)
        x = torch.randn(64, 3, generator=g)
        y = x.sum(1, keepdim=True)
        model.set_data_loader(fl.data.DataLoader.from_tensors(x, y).batch_size(16))
        out["ratios_before"] = model.chunk_ratios
        # One step: this rank's slice of the first batch, then the weighted mean gradient.
        epoch = iter(model.epoch(0))
        inputs, targets = next(epoch)
        out["rows"] = inputs.shape[0]
        nn.functional.mse_loss(model(inputs), targets).backward()
        model.step()
        out["after_one_step"] = params_of(model)
        # The same step on one process, on the whole batch.
        (full_x, full_y), *_ = fl.data.DataLoader.from_tensors(x, y).batch_size(16).build().epoch(0)
        optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
        nn.functional.mse_loss(reference(full_x), full_y).backward()
        optimizer.step()
        out["reference"] = params_of(reference)
        # Rank 1 three times slower per batch: after the calibration steps the shares follow.
        batches = 0
        for e in range(1, 5):
            for inputs, targets in model.epoch(e):
                started = time.perf_counter()
                nn.functional.mse_loss(model(inputs), targets).backward()
                if rank == 1:
                    time.sleep(2 * (time.perf_counter() - started) + 0.002)
                model.step()
                batches += 1
        out["batches"] = batches
        out["ratios_after"] = model.chunk_ratios
        out["throughput"] = model.throughput
        out["params"] = params_of(model)
        model.finish()
    except BaseException:
        out["error"] = traceback.format_exc()
    results.put(out)


def timed_out_together_scenario(rank: int, world: int, port: int, results) -> None:
    """Every rank's collective timed out (a slow network, nobody stuck): each asks which ranks
    never reached it, and gets None as soon as all have said so, not after the grace period."""
    from flodl.train.process_group import (
        init_launched_group,
        leave_group,
        ranks_missing_from_collective,
    )

    act_as_launched_rank(rank, world, port)
    out: dict = {"rank": rank}
    try:
        init_launched_group("gloo", 30)
        time.sleep(0.5 * rank)  # they time out a little apart
        started = time.monotonic()
        out["missing"] = ranks_missing_from_collective(30)
        out["seconds"] = time.monotonic() - started
        leave_group()
    except BaseException:
        out["error"] = traceback.format_exc()
    results.put(out)


def empty_shard_scenario(rank: int, world: int, port: int, results) -> None:
    """One sample on two ranks with drop_last(False): rank 0 has a batch, rank 1 none. Every rank
    must be refused at once (the empty rank alone used to raise; the other waited out the
    timeout in the batch-count all_reduce)."""
    act_as_launched_rank(rank, world, port)
    out: dict = {"rank": rank}
    try:
        model = graph()
        fl.Trainer.setup(model, None, lambda p: torch.optim.SGD(p, lr=0.1), timeout=15)
        one = fl.data.DataLoader.from_tensors(torch.zeros(1, 3)).batch_size(1).drop_last(False)
        started = time.monotonic()
        try:
            model.set_data_loader(one)
        except Exception as err:
            out["error_type"] = type(err).__name__
            out["message"] = str(err)
        out["seconds"] = time.monotonic() - started
        model.finish()
    except BaseException:
        out["error"] = traceback.format_exc()
    results.put(out)
