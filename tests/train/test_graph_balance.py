"""The auto-balancer of Graph mode: shares of a batch by throughput, and their exact average."""

from __future__ import annotations

import pytest
import torch

import flodl as fl
from flodl.train.graph_balance import (
    MIN_CHUNK_RATIO,
    hinted_ratios,
    ratios_for,
    shard_sizes,
)
from tests.train import graph_ranks
from tests.train.launched import run_launched


@pytest.mark.parametrize("batch", [4, 7, 16, 33, 256])
@pytest.mark.parametrize(
    "ratios", [[0.5, 0.5], [0.7, 0.3], [0.95, 0.05], [0.05, 0.9, 0.05], [0.25] * 4]
)
def test_shard_sizes_cover_the_batch_with_at_least_one_row_each(batch, ratios):
    sizes = shard_sizes(batch, ratios)
    assert sum(sizes) == batch and min(sizes) >= 1 and len(sizes) == len(ratios)
    for size, ratio in zip(sizes[:-1], ratios[:-1], strict=True):
        assert abs(size - batch * ratio) <= 1 + len(ratios)


def test_ratios_follow_throughput_and_never_starve_a_rank():
    assert ratios_for([0.0, 0.0]) is None  # nothing measured yet: keep the current shares
    assert ratios_for([2.0, 2.0]) == [0.5, 0.5]
    ratios = ratios_for([1000.0, 1.0, 1.0])
    assert ratios is not None and min(ratios) >= MIN_CHUNK_RATIO - 1e-12
    assert sum(ratios) == pytest.approx(1.0) and ratios[0] == pytest.approx(0.9)
    assert hinted_ratios(3, 2, 2.0) == [0.4, 0.4, 0.2]


def test_balance_is_checked_like_every_knob():
    with pytest.raises(fl.TrainerConfigError, match="balance must be True, False or None"):
        fl.DdpConfig(max_anchor=0, balance="yes")
    with pytest.raises(fl.TrainerConfigError, match="pass max_anchor=0 with it"):
        fl.DdpConfig(balance=True)
    assert fl.DdpConfig(max_anchor=0, balance=True).balance is True


def test_one_device_has_the_whole_batch():
    model = fl.FlowBuilder(torch.nn.Linear(2, 1)).build()
    assert model.chunk_ratios == [1.0]  # before setup
    fl.Trainer.setup(model, None, None)
    assert model.chunk_ratios == [1.0] and model.throughput == [0.0]


@pytest.mark.slow
@pytest.mark.multiproc
def test_two_ranks_split_batches_by_throughput_and_average_exactly():
    outs = run_launched(graph_ranks.balance_scenario, 2, timeout=150)
    fast, slow = outs
    # The speed hint (rank 1 a third as fast) seeds the shares: 12 and 4 rows of 16.
    assert fast["ratios_before"] == pytest.approx([0.75, 0.25])
    assert (fast["rows"], slow["rows"]) == (12, 4)
    # Weighted by rows, the two slices' gradients are the whole batch's: the first step equals
    # one process's full-batch step.
    for out in outs:
        for got, want in zip(out["after_one_step"], out["reference"], strict=True):
            assert got == pytest.approx(want, abs=1e-6)
    # 4 more epochs of 4 batches: rebalanced at step 10 from measured throughput, the same
    # shares on both ranks, the slow rank's share under half.
    assert fast["batches"] == slow["batches"] == 16
    assert fast["ratios_after"] == slow["ratios_after"]
    assert sum(fast["ratios_after"]) == pytest.approx(1.0)
    assert fast["ratios_after"][1] < 0.5 and fast["ratios_after"][1] >= MIN_CHUNK_RATIO - 1e-9
    assert fast["throughput"] == slow["throughput"] and fast["throughput"][0] > 0
    assert fast["params"] == slow["params"]  # lockstep: identical replicas
