from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import flodl as fl
from flodl.data.sampling import shard_bounds


def test_epoch_order_is_a_permutation_reproducible_and_varies_with_epoch_and_seed():
    a = fl.data.epoch_order(500, 0, seed=1)
    assert sorted(a.tolist()) == list(range(500))
    assert a.equal(fl.data.epoch_order(500, 0, seed=1))
    assert not a.equal(fl.data.epoch_order(500, 1, seed=1))
    assert not a.equal(fl.data.epoch_order(500, 0, seed=2))
    assert fl.data.epoch_order(5, 9, shuffle=False).tolist() == [0, 1, 2, 3, 4]


def test_epoch_order_does_not_touch_the_global_rng():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    fl.data.epoch_order(100, 3)
    assert torch.rand(3).equal(expected)


def test_seed_plus_epoch_wraps_to_64_bits():
    top = (1 << 64) - 1
    assert fl.data.epoch_order(50, 1, seed=top).equal(fl.data.epoch_order(50, 0, seed=0))


def test_partition_sizes_equal_proportional_and_zero_ratios():
    assert fl.data.partition_sizes(100, 3) == [34, 33, 33]
    assert fl.data.partition_sizes(900, 3, [3, 2, 1]) == [450, 300, 150]
    assert fl.data.partition_sizes(10, 2, [0, 0]) == [5, 5]
    assert fl.data.partition_sizes(10, 3, [1, 1, 1]) == [4, 3, 3]


def test_partition_sizes_bad_input():
    with pytest.raises(fl.data.LoaderConfigError, match="one ratio per rank"):
        fl.data.partition_sizes(10, 2, [1, 2, 3])
    with pytest.raises(fl.data.LoaderConfigError, match="≥ 0"):
        fl.data.partition_sizes(10, 2, [1, -1])
    with pytest.raises(fl.data.LoaderConfigError, match="world_size"):
        fl.data.partition_sizes(10, 0)


@given(
    n=st.integers(0, 300),
    ratios=st.lists(st.floats(0, 10, allow_nan=False), min_size=1, max_size=6),
)
def test_partition_sizes_always_sum_to_n(n, ratios):
    sizes = fl.data.partition_sizes(n, len(ratios), ratios)
    assert sum(sizes) == n and all(s >= 0 for s in sizes)


@pytest.mark.parametrize("sizes", [[5, 5], [7, 3], [4, 3, 3], [1, 1, 8]])
def test_make_partition_consecutive_offsets_cover_without_overlap(sizes):
    n = sum(sizes)
    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    parts = [
        fl.data.make_partition(o, s, n, 2, seed=5) for o, s in zip(offsets, sizes, strict=True)
    ]
    seen = torch.cat(parts).tolist()
    assert sorted(seen) == list(range(n)) and len(seen) == n
    assert [len(p) for p in parts] == sizes


def test_make_partition_deterministic_and_epoch_aware():
    a = fl.data.make_partition(0, 50, 100, 0, seed=3)
    assert a.equal(fl.data.make_partition(0, 50, 100, 0, seed=3))
    assert not a.equal(fl.data.make_partition(0, 50, 100, 1, seed=3))
    assert fl.data.make_partition(90, 50, 100, 0).shape == (10,)  # clipped at n


def test_shard_bounds_drop_rule():
    # drop_last without ratios: equal shards, tail of the epoch order skipped
    assert [shard_bounds(10, r, 3, None, True) for r in range(3)] == [(0, 3), (3, 3), (6, 3)]
    # otherwise the partition covers everything
    assert [shard_bounds(10, r, 3, None, False) for r in range(3)] == [(0, 4), (4, 3), (7, 3)]
    assert [shard_bounds(6, r, 2, (2, 1), True) for r in range(2)] == [(0, 4), (4, 2)]
    with pytest.raises(fl.data.LoaderConfigError, match="outside"):
        shard_bounds(10, 3, 3, None, True)
