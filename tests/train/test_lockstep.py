"""Builder mode's Sync and Cadence over collectives, without a coordinator (flodl.train.lockstep)."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest
import torch

import flodl as fl
from flodl.train.builder_launch import Lagging
from flodl.train.el_che import ElChe
from flodl.train.lockstep import runs_in_lockstep, window_counts
from flodl.train.train_spec import TrainSpec
from flodl.train.transport import progress_key
from tests.train import toy

SYNC, CADENCE, ASYNC = fl.ApplyPolicy.SYNC, fl.ApplyPolicy.CADENCE, fl.ApplyPolicy.ASYNC
COLLECTIVE, CPU = fl.AverageBackend.NCCL, fl.AverageBackend.CPU


@pytest.mark.parametrize(
    ("settings", "lockstep"),
    [
        ({"policy": SYNC}, True),
        ({"policy": CADENCE}, True),
        ({"policy": CADENCE, "progressive": True}, True),
        ({"policy": SYNC, "partition_ratios": [2.0, 1.0]}, True),
        ({"policy": ASYNC}, False),  # each rank at its own pace: the coordinator decides
        ({"policy": SYNC, "backend": CPU}, False),  # snapshots are averaged centrally
        ({"policy": CADENCE, "backend": CPU}, False),
        ({"policy": CADENCE, "progressive": False}, False),  # per-epoch plans by throughput
        ({"policy": CADENCE, "partition_ratios": [2.0, 1.0]}, False),
        ({"policy": SYNC, "progressive": True}, False),  # chunks from a pool
    ],
)
def test_which_runs_need_no_coordinator(settings, lockstep):
    spec = TrainSpec(toy.make_model, toy.make_sgd, toy.mse_step, **settings)
    assert runs_in_lockstep(spec) is lockstep


def two_cpu_ranks(step, data, *, epochs: int) -> fl.TrainerBuilder:
    """A Sync run on two CPU ranks (one thread each), batch 16."""
    return (
        fl.Trainer.builder(toy.make_model, toy.make_sgd, step)
        .dataset(data)
        .batch_size(16)
        .num_epochs(epochs)
        .devices(["cpu", "cpu"])
        .threads_per_rank(1)
        .timeout(60)
        .policy(SYNC)
    )


def sync_by_hand(data, n_epochs: int, batch: int, ratios: list[float]) -> list[torch.Tensor]:
    """Two replicas trained as the docs say Sync in lockstep trains them: each rank its share of
    the epoch, one local SGD step per batch, then the batch-weighted mean of the replicas (a rank
    whose share ran out weighs 0)."""
    x, y = data
    n = len(x)
    models = [toy.make_model("cpu") for _ in range(2)]
    models[1].load_state_dict(copy.deepcopy(models[0].state_dict()))
    optims = [toy.make_sgd(m.parameters()) for m in models]
    sizes = fl.data.partition_sizes(n, 2, ratios)
    for epoch in range(n_epochs):
        shares = [
            fl.data.make_partition(sum(sizes[:r]), sizes[r], n, epoch, seed=42) for r in range(2)
        ]
        mine = [s // batch for s in sizes]
        for b in range(max(mine)):
            weights = []
            for r in range(2):
                trained = b < mine[r]
                weights.append(1.0 if trained else 0.0)
                if trained:
                    idx = shares[r][b * batch : (b + 1) * batch]
                    optims[r].zero_grad()
                    toy.mse_step(models[r], [x[idx], y[idx]]).backward()
                    optims[r].step()
            with torch.no_grad():
                for pair in zip(*(m.parameters() for m in models), strict=True):
                    mean = sum(w * p for w, p in zip(weights, pair, strict=True)) / sum(weights)
                    for p in pair:
                        p.copy_(mean)
    return [p.detach().clone() for p in models[0].parameters()]


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("ratio", [1.0, 2.0, 5.0])
@pytest.mark.parametrize(("cap", "data"), [(2, 100), (3, 100), (2, 5)])
def test_a_smoke_epoch_gives_every_rank_its_cap_whatever_el_che_proposes(world, ratio, cap, data):
    # Cadence's windows follow the ranks' speeds; a smoke run still trains `cap` batches on
    # every rank (fewer only when the data runs out), as the coordinator's runs do.
    el_che = ElChe(world, 2).with_speed_ratio(world - 1, ratio)
    total = min(data, cap * world)
    taken, done, windows = [0] * world, 0, 0
    while (counts := window_counts(el_che, total - done, cap, taken)) is not None:
        assert all(c >= 0 for c in counts) and any(counts)
        taken = [t + c for t, c in zip(taken, counts, strict=True)]
        done += sum(counts)
        windows += 1
        assert windows <= total  # every window trains at least one batch: the epoch ends
    assert done == total
    assert max(taken) <= cap
    if data >= cap * world:
        assert taken == [cap] * world


@pytest.mark.multiproc
def test_sync_in_lockstep_averages_after_every_batch_with_unequal_shares():
    # Rank 0 holds two thirds of every epoch: its last batches are averaged with rank 1 at
    # weight 0, so they count in full, and the collectives stay matched.
    data = toy.regression_data(192)
    state = two_cpu_ranks(toy.mse_step, data, epochs=2).partition_ratios([2.0, 1.0]).run().join()
    expected = sync_by_hand(data, 2, 16, [2.0, 1.0])
    for got, want in zip(state.params, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    # ... and not what equal weights at every batch would have given (the test can fail).
    assert not torch.allclose(state.params[0], sync_by_hand(data, 2, 16, [1.0, 1.0])[0])


@pytest.mark.multiproc
@pytest.mark.timeout(240)
def test_when_rank_0_raises_the_survivors_replica_is_still_on_partial():
    # No coordinator in rank 0 to lose: rank 1's averaging fails, it hands its replica in, and
    # the supervising process averages the hand-ins as soon as every rank has exited.
    handle = two_cpu_ranks(toy.failing_rank0_step, toy.regression_data(), epochs=3).run()
    with pytest.raises(fl.TrainingError) as info:
        handle.join()
    err = info.value
    assert err.rank == 0
    assert "injected failure in rank 0's train_step" in err.details
    assert "rank 0 failed at local step 3" in err.details
    assert "The survivors' average (rank 1) is on .partial" in str(err)
    assert err.partial is not None and len(err.partial.params) == 2
    assert all(torch.isfinite(p).all() for p in err.partial.params)


@pytest.fixture
def store():
    server = torch.distributed.TCPStore(
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=5)
    )
    yield server


def test_the_rank_its_peers_wait_for_is_named_after_the_timeout(store):
    watch = Lagging(store, timeout=4.0)
    store.set(progress_key(0), "7 30")  # entered its 7th collective: waiting there
    store.set(progress_key(1), "6 29")  # still inside its 29th batch... or hung there
    assert watch.behind([0, 1], now=100.0) == []  # first sighting
    assert watch.behind([0, 1], now=103.0) == []  # not yet the timeout
    assert watch.behind([0, 1], now=104.5) == [(1, 4.5)]
    assert watch.behind([0], now=106.0) == []  # one rank alone waits for nobody


def test_a_rank_that_moves_or_is_level_with_its_peers_is_not_behind(store):
    watch = Lagging(store, timeout=4.0)
    store.set(progress_key(0), "7 30")
    store.set(progress_key(1), "6 29")
    watch.behind([0, 1], now=100.0)
    store.set(progress_key(1), "6 30")  # a slow batch finished: progress
    assert watch.behind([0, 1], now=104.5) == []
    store.set(progress_key(1), "7 30")  # level: both wait in the same collective, nobody's fault
    assert watch.behind([0, 1], now=110.0) == []
