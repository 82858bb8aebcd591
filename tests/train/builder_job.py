"""A Builder-mode script as a user writes it, for tests that need the training process itself
to be a separate program (killing it, its environment).

    python -m tests.train.builder_job POLICY BACKEND

Starts two CPU ranks training for long, prints ``pids <p0> <p1>`` once the first epoch is in,
then waits for the end of training (a test kills it first).
"""

from __future__ import annotations

import sys

import flodl as fl
from tests.train import toy


def main() -> None:
    policy, backend = sys.argv[1:3]
    handle = (
        fl.Trainer.builder(toy.make_model, toy.make_sgd, toy.mse_step)
        .dataset(toy.regression_data())
        .batch_size(16)
        .num_epochs(10_000)
        .devices(["cpu", "cpu"])
        .policy(fl.ApplyPolicy[policy])
        .backend(fl.AverageBackend[backend])
        .threads_per_rank(1)
        .run()
    )
    handle.next_metrics()  # the ranks are training
    print("pids", *handle.pids, flush=True)
    handle.join()


if __name__ == "__main__":
    main()
