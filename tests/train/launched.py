"""Ranks as a c10d launcher (torchrun) would start them, for tests of the launcher code paths.

``run_launched(scenario, world)`` spawns ``world`` processes running ``scenario(rank, world, port,
results)`` (a function importable by name); each calls :func:`act_as_launched_rank` first and puts
one dict of observations, with ``"rank"`` and, on failure, ``"error"``, on ``results``.
"""

from __future__ import annotations

import os
import queue
import socket
from collections.abc import Callable
from typing import Any

import pytest
import torch


def act_as_launched_rank(rank: int, world: int, port: int) -> None:
    """The environment torchrun gives a rank, and one intra-op thread (2 ranks share 2 cores)."""
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)


def run_launched(
    scenario: Callable[..., None],
    world: int = 2,
    *,
    timeout: float = 180,
    reporting: int | None = None,
) -> list[dict[str, Any]]:
    """Every rank's observations, by rank; fails the test if a rank errs or stays silent.

    ``reporting``: how many ranks report (a scenario may freeze some); the rest are killed.
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = torch.multiprocessing.get_context("spawn")
    results = ctx.Queue()
    procs = [
        ctx.Process(target=scenario, args=(r, world, port, results), daemon=True)
        for r in range(world)
    ]
    for p in procs:
        p.start()
    outs: list[dict[str, Any]] = []
    try:
        expected = world if reporting is None else reporting
        outs = sorted(
            (results.get(timeout=timeout) for _ in range(expected)), key=lambda o: o["rank"]
        )
    except queue.Empty:
        pytest.fail(f"a launched rank did not report within {timeout:.0f} s")
    finally:
        reported = {o["rank"] for o in outs}
        for rank, p in enumerate(procs):
            if reporting is not None and rank not in reported:
                p.kill()  # frozen or silent on purpose
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    for out in outs:
        assert "error" not in out, out["error"]
    return outs
