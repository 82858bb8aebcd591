"""Rank bodies for Builder-mode tests under a launcher (spawned processes import them by name).

Each rank sets the environment a c10d launcher (torchrun) would, so ``Trainer.builder(...).run()``
takes the launcher path, and puts what it observed on the result queue.
"""

from __future__ import annotations

import traceback

import flodl as fl
from flodl.train.errors import CollectiveError
from tests.train import toy
from tests.train.launched import act_as_launched_rank


class CallLog:
    """A monitor that records its calls in the process that receives them."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def log(self, epoch: int, seconds: float, metrics: dict) -> None:
        self.calls.append(f"log {epoch}")

    def finish(self) -> None:
        self.calls.append("finish")


def scenario(rank: int, world: int, port: int, results) -> None:
    act_as_launched_rank(rank, world, port)
    out: dict = {"rank": rank}
    try:
        monitor = CallLog()
        handle = (
            fl.Trainer.builder(toy.make_model, toy.make_sgd, toy.mse_step)
            .dataset(toy.regression_data())
            .batch_size(16)
            .num_epochs(2)
            .threads_per_rank(1)
            .timeout(30)
            .monitor(monitor)
            .run()
        )
        out["streamed"] = [m.epoch for m in iter(handle.next_metrics, None)]  # must end
        state = handle.join()
        out["params"] = [p.flatten().tolist() for p in state.params]
        out["monitor"] = monitor.calls
    except BaseException:
        out["error"] = traceback.format_exc()
    results.put(out)


def frozen_rank0_scenario(
    rank: int,
    world: int,
    port: int,
    results,
    policy: str = "CADENCE",
    backend: str = "CPU",
    step: str = "freezing_rank0_step",
    model: str = "make_model",
) -> None:
    """Rank 0 freezes (SIGSTOP) mid-training under a launcher (or, with ``step``, another
    ``toy`` step stalls some rank); the ranks that report say what they saw."""
    import time

    act_as_launched_rank(rank, world, port)
    out: dict = {"rank": rank}
    started = time.monotonic()
    try:
        (
            fl.Trainer.builder(getattr(toy, model), toy.make_sgd, getattr(toy, step))
            .dataset(toy.regression_data())
            .batch_size(16)
            .num_epochs(3)
            .policy(fl.ApplyPolicy[policy])
            .backend(fl.AverageBackend[backend])
            .threads_per_rank(1)
            .timeout(8)
            .run()
            .join()
        )
    except fl.TrainingError as err:
        out["training_error"] = str(err)
        out["error_rank"] = err.rank
    except CollectiveError as err:
        out["collective_error"] = str(err)
    except BaseException:
        out["error"] = traceback.format_exc()
    out["seconds"] = time.monotonic() - started
    results.put(out)
