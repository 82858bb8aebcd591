"""Profiling: per-node and per-level times, nested graphs, and no timing code when off."""

from __future__ import annotations

import copy
import pickle

import torch
from torch import nn

import flodl as fl

from .trees import composed, x


def test_profile_is_none_until_enabled_and_run():
    model = composed()
    model(x())
    assert model.profile() is None and not model.profiling
    model.enable_profiling()
    assert model.profile() is None
    model(x())
    assert model.profile() is not None


def test_per_node_and_per_level_times():
    model = (
        fl.FlowBuilder(nn.Linear(4, 4)).tag("a")
        .split(nn.Linear(4, 4), nn.Linear(4, 4)).merge(fl.MergeOp.ADD)
        .through(nn.ReLU()).build()
    )  # fmt: skip
    model.enable_profiling()
    model(torch.randn(2, 4))
    p = model.profile()
    assert [n.id for n in p.nodes] == [n.id for n in model.nodes if n.kind != "identity"]
    assert all(n.seconds > 0 for n in p.nodes)
    levels = {n.id: n.level for n in p.nodes}
    assert levels["linear_1"] == 0
    split = [n.id for n in model.nodes if n.branch is not None]
    assert {levels[s] for s in split} == {1}  # the two branches are independent
    assert p.levels[1].num_nodes == 2
    assert p.levels[1].seconds == sum(n.seconds for n in p.nodes if n.level == 1)
    assert p.timing("a") == p.timing("linear_1") > 0
    assert p.total >= sum(n.seconds for n in p.nodes)
    text = str(p)
    assert text.startswith("Forward: ") and 'linear_1 "a"' in text


def test_nested_graphs_are_profiled_too():
    model = composed()
    model.enable_profiling()
    model(x())
    p = model.profile()
    assert "encoder" in p.children
    assert [n.id for n in p.children["encoder"].nodes] == ["linear_1", "relu_2", "linear_3"]
    assert p.timing("graph_1") >= p.children["encoder"].total * 0.5


def test_profiling_off_means_no_timing_code():
    model = composed()
    plain = model.code
    assert "_now" not in plain
    model.enable_profiling()
    assert "_now()" in model.code and "_now" in model.subgraph("encoder").code
    model.disable_profiling()
    assert model.code.replace("#", "") and "_now" not in model.code
    assert model.profile() is None
    y = model(x())
    assert y.shape == (1, 2) and model.profile() is None


def test_profiled_forward_gives_the_same_result_and_gradients():
    model = composed()
    inp = x(3)
    ref = model(inp)
    model.enable_profiling()
    out = model(inp)
    torch.testing.assert_close(out, ref)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_profiling_survives_copy_and_pickle():
    model = composed()
    model.enable_profiling()
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        clone(x())
        assert clone.profiling and clone.profile() is not None


def test_errors_still_name_the_node_when_profiling():
    model = fl.FlowBuilder(nn.Linear(2, 3)).through(nn.Linear(4, 1)).build()
    model.enable_profiling()
    try:
        model(torch.randn(1, 2))
    except RuntimeError as err:
        assert any("linear_2" in note for note in err.__notes__)
    else:  # pragma: no cover
        raise AssertionError("shape mismatch not raised")
