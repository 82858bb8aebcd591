"""A Graph-mode script as a user writes it, for the tests of setup starting its own ranks.

    python self_launch_job.py OUT_DIR --devices cpu,cpu [--fail-rank R] [--fail-before-finish R]
        [--slow-exit S] [--hang] [--skip-setup R] [--timeout T] [--slow-finish S] [--slow-rank R]
        [--stall-rank R] [--late-rank R --late S] [--tiny]

Each rank writes ``OUT_DIR/rank<R>.json`` (world, steps, pid, threads, parameters) at the end.
``--fail-rank R``: rank R raises after its first step; ``--fail-before-finish R``: after its
last step, before ``finish`` (its peers are then leaving the group, not in a collective). ``--slow-exit S``: a rank ends S seconds
after its group was released (as an interpreter with much to tear down does on a busy machine). ``--hang``: rank 0 writes its pid and the
others' to ``OUT_DIR/pids`` after setup, then sleeps (a test kills it). ``--skip-setup R``:
rank R ends before calling setup. ``--timeout T``: setup's timeout (default 30 s).
``--slow-finish S``: rank R (``--slow-rank``, default 1) calls ``finish`` S seconds after its
last step (a long final evaluation). ``--stall-rank R``: rank R stops answering after its first step (alive, in a
long sleep), so its peers' next collective waits out the timeout. ``--late-rank R --late S``:
rank R reaches its second step S seconds after the others. ``--tiny``: the model is one
``Linear(4, 1)`` (fewer gradient values than three ranks: gloo then closes a timed-out rank's
connections to its peers).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import time
from pathlib import Path

import psutil
import torch
from torch import nn

import flodl as fl


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--devices", default=None)
    parser.add_argument("--fail-rank", type=int, default=None)
    parser.add_argument("--fail-before-finish", type=int, default=None)
    parser.add_argument("--slow-exit", type=float, default=0.0)
    parser.add_argument("--hang", action="store_true")
    parser.add_argument("--skip-setup", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--slow-finish", type=float, default=0.0)
    parser.add_argument("--slow-rank", type=int, default=1)
    parser.add_argument("--stall-rank", type=int, default=None)
    parser.add_argument("--late-rank", type=int, default=None)
    parser.add_argument("--late", type=float, default=0.0)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args()
    if args.skip_setup is not None and int(os.environ.get("RANK", "0")) == args.skip_setup:
        return
    if args.slow_exit:  # registered before setup's own handler, so it runs after the group left
        atexit.register(time.sleep, args.slow_exit)
    torch.manual_seed(int(os.environ.get("RANK", "0")))  # rank 0's weights win at setup
    if args.tiny:
        model = fl.FlowBuilder(nn.Linear(4, 1)).build()
    else:
        model = fl.FlowBuilder(nn.Linear(4, 8)).through(nn.Tanh()).through(nn.Linear(8, 1)).build()
    fl.Trainer.setup(
        model,
        None,
        lambda params: torch.optim.SGD(params, lr=0.05),
        devices=args.devices.split(",") if args.devices else None,
        timeout=args.timeout,
    )
    rank = model.rank
    if args.hang and rank == 0:
        me = psutil.Process()
        (args.out / "pids").write_text(
            json.dumps([me.pid, *(c.pid for c in me.children(recursive=True))])
        )
        time.sleep(120)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 4, generator=g)
    model.set_data_loader(fl.data.DataLoader.from_tensors(x, x.sum(1, keepdim=True)).batch_size(8))
    for epoch in range(2):
        for inputs, targets in model.epoch(epoch):
            nn.functional.mse_loss(model(inputs), targets).backward()
            model.step()
            if rank == args.stall_rank:
                time.sleep(300)
            if rank == args.late_rank and model.training_step == 1:
                time.sleep(args.late)
            if rank == args.fail_rank:
                raise RuntimeError(f"rank {rank} fails on purpose")
    if rank == args.fail_before_finish:
        raise RuntimeError(f"rank {rank} fails on purpose before finish")
    if rank == args.slow_rank:
        time.sleep(args.slow_finish)
    model.finish()
    result = {
        "rank": rank,
        "world": model.world_size,
        "steps": model.training_step,
        "pid": os.getpid(),
        "threads": torch.get_num_threads(),
        "params": [p.detach().tolist() for p in model.parameters()],
    }
    (args.out / f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
