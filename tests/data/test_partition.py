"""Partitioning across ranks: shards never overlap, cover the epoch, and keep DDP in lockstep."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import flodl as fl

from ..conftest import clean_env


def rank_loaders(n, world, bs, *, drop_last, ratios=None, mode="resident", seed=9):
    return [
        fl.data.DataLoader.from_tensors(torch.arange(n))
        .batch_size(bs)
        .seed(seed)
        .drop_last(drop_last)
        .mode(mode)
        .partition(rank, world, ratios)
        .build()
        for rank in range(world)
    ]


def indices(dl, epoch) -> list[int]:
    return [i for b in dl.epoch(epoch) for i in b[0].tolist()]


@pytest.mark.parametrize("mode", ["resident", "streaming"])
def test_without_drop_last_every_sample_is_seen_exactly_once_across_ranks(mode):
    loaders = rank_loaders(103, 3, 8, drop_last=False, mode=mode)
    for epoch in range(3):
        seen = [i for dl in loaders for i in indices(dl, epoch)]
        assert sorted(seen) == list(range(103))
    assert [dl.num_samples for dl in loaders] == [35, 34, 34]


def test_with_drop_last_ranks_get_equal_batch_counts_and_never_overlap():
    loaders = rank_loaders(103, 3, 8, drop_last=True)
    assert [len(dl) for dl in loaders] == [4, 4, 4]  # 103 // 3 = 34 per rank → 4 batches of 8
    seen = [i for dl in loaders for i in indices(dl, 0)]
    assert len(seen) == len(set(seen)) == 96


def test_shards_change_with_the_epoch_and_are_the_global_permutation_sliced():
    dl0, dl1 = rank_loaders(40, 2, 4, drop_last=False)
    assert indices(dl0, 0) != indices(dl0, 1)
    order = fl.data.epoch_order(40, 1, seed=9).tolist()
    assert indices(dl0, 1) == order[:20] and indices(dl1, 1) == order[20:]


def test_ratios_give_heterogeneous_ranks_proportional_shards():
    loaders = rank_loaders(90, 3, 5, drop_last=True, ratios=[3, 2, 1])
    assert [dl.num_samples for dl in loaders] == [45, 30, 15]
    assert [len(dl) for dl in loaders] == [9, 6, 3]
    seen = [i for dl in loaders for i in indices(dl, 0)]
    assert sorted(seen) == list(range(90))


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 120),
    world=st.integers(1, 5),
    bs=st.integers(1, 16),
    drop_last=st.booleans(),
    epoch=st.integers(0, 1000),
)
def test_partition_invariants(n, world, bs, drop_last, epoch):
    smallest = n // world  # the smallest shard, with or without drop_last
    if smallest == 0 or (drop_last and smallest < bs):  # some rank would run zero steps
        with pytest.raises(fl.data.BatchSizeError, match="0 batches"):
            rank_loaders(n, world, bs, drop_last=drop_last)
        return
    loaders = rank_loaders(n, world, bs, drop_last=drop_last)
    per_rank = [indices(dl, epoch) for dl in loaders]
    seen = [i for rank in per_rank for i in rank]
    assert len(seen) == len(set(seen))  # never twice
    if drop_last:
        assert len({len(dl) for dl in loaders}) == 1  # lockstep for DDP
        assert all(len(r) == len(loaders[0]) * bs for r in per_rank)
    else:
        assert sorted(seen) == list(range(n))  # exactly once


def test_a_rank_that_would_get_no_batch_is_refused_at_build():
    # 5 samples on 8 ranks: ranks 5..7 get nothing even without drop_last
    with pytest.raises(fl.data.BatchSizeError, match=r"rank=5, world_size=8\) gives this rank 0"):
        rank_loaders(5, 8, 1, drop_last=False)
    with pytest.raises(fl.data.BatchSizeError, match="fewer than batch_size 8, with drop_last"):
        rank_loaders(90, 2, 8, drop_last=True, ratios=[10, 0.5])  # rank 1: 4 samples


def test_partition_settings_are_validated():
    base = fl.data.DataLoader.from_tensors(torch.arange(10)).batch_size(2)
    with pytest.raises(fl.data.LoaderConfigError, match=r"outside 0\.\.1"):
        base.partition(2, 2).build()
    with pytest.raises(fl.data.LoaderConfigError, match="one per rank"):
        base.partition(0, 2, [1, 2, 3]).build()
    with pytest.raises(fl.data.LoaderConfigError, match="initialised"):
        base.partition().build()


RANK_SCRIPT = textwrap.dedent(
    """
    import json, sys, datetime
    import torch, torch.distributed as dist
    import flodl as fl

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = fl.data.DataLoader.from_tensors(torch.arange(101)).batch_size(6).seed(3).partition().build()
    seen = []
    for epoch in range(2):
        for batch in loader.epoch(epoch):
            seen.append(batch[0].tolist())
            loss = model(batch[0].float().unsqueeze(1)).square().mean()
            opt.zero_grad()
            loss.backward()
            # Gradients averaged after backward, as model.step() does: an all_reduce per batch,
            # so unequal batch counts would hang here. (Not torch DDP: its backward-time gloo
            # work holds a Python object that a gloo thread may free during interpreter
            # teardown, which aborts the process now and then — a torch bug.)
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= dist.get_world_size()
            opt.step()
    dist.barrier()
    print(json.dumps({"rank": dist.get_rank(), "batches": seen,
                      "weight": model.weight.item()}))
    dist.destroy_process_group()
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.multiproc
def test_two_gloo_ranks_train_in_lockstep_on_disjoint_shards(tmp_path):
    port = str(free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANK_SCRIPT],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
                RANK=str(r),
                WORLD_SIZE="2",
                OMP_NUM_THREADS="1",
            ),
        )
        for r in range(2)
    ]
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=120)
        finally:
            p.kill()
        assert p.returncode == 0, err
        outs.append(json.loads(out.strip().splitlines()[-1]))
    r0, r1 = sorted(outs, key=lambda o: o["rank"])
    assert len(r0["batches"]) == len(r1["batches"]) == 2 * (101 // 2 // 6)
    for epoch in range(2):
        k = 101 // 2 // 6
        a = [i for b in r0["batches"][epoch * k : (epoch + 1) * k] for i in b]
        b = [i for b in r1["batches"][epoch * k : (epoch + 1) * k] for i in b]
        assert not set(a) & set(b)
        order = fl.data.epoch_order(101, epoch, seed=3).tolist()
        assert a == order[:48] and b == order[50:98]  # 50 per rank, 48 in full batches
    assert r0["weight"] == pytest.approx(r1["weight"])  # DDP kept the replicas identical
