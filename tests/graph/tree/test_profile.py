"""Profiling: per-node and per-level times, nested graphs, and no timing code when off."""

from __future__ import annotations

import copy
import pickle
import re

import pytest
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


def test_timing_finds_every_tag_of_a_node_and_nested_paths():
    model = fl.FlowBuilder(nn.Linear(2, 2)).tag("a").tag("b").through(nn.ReLU()).build()
    model.enable_profiling()
    model(torch.randn(3, 2))
    p = model.profile()
    assert p.timing("b") == p.timing("a") == p.timing("linear_1") > 0
    assert p.nodes[0].tags == ("a", "b") and p.nodes[0].tag == "a"
    tree = composed()
    tree.enable_profiling()
    tree(x())
    tp = tree.profile()
    assert tp.timing("encoder.hidden") == tp.children["encoder"].timing("linear_1") > 0
    assert "encoder.hidden" in tp.names() and "head" in tp.names()


def test_timing_takes_a_loop_by_its_tag_as_freeze_and_tagged_at_do():
    body = fl.FlowBuilder(nn.Linear(8, 8)).tag("core").build()
    model = fl.FlowBuilder(nn.Linear(8, 8)).loop_body(body).for_n(2).tag("L").build()
    assert model.freeze("L.body.core") == 2  # the loop's tag is a path segment everywhere
    model.enable_profiling()
    model(torch.randn(3, 8))
    profile = model.profile()
    assert profile.timing("L.body.core") == profile.timing("loop_2.body.core") > 0


def test_timing_of_an_unknown_name_is_an_error_not_zero():
    model = fl.FlowBuilder().tag("entry").input("ctx").through(nn.Linear(2, 2)).tag("hidden")
    model = model.build()
    model.enable_profiling()
    model(torch.randn(1, 2), ctx=torch.zeros(1))
    p = model.profile()
    # the identity entry and inputs run no code: known names, zero time
    assert p.timing("entry") == p.timing("ctx") == p.timing("identity_1") == 0.0
    with pytest.raises(fl.PathError) as err:
        p.timing("hiddn")
    assert "hidden" in err.value.suggestions and "timing('hiddn')" in str(err.value)
    with pytest.raises(fl.PathError):
        p.timing("encoder.hidden")  # no such child


def test_profile_text_shows_levels_node_counts_and_all_tags():
    model = (
        fl.FlowBuilder(nn.Linear(4, 4)).tag("a").tag("b")
        .split(nn.Linear(4, 4), nn.Linear(4, 4)).merge(fl.MergeOp.ADD)
        .build()
    )  # fmt: skip
    model.enable_profiling()
    model(torch.randn(2, 4))
    lines = str(model.profile()).splitlines()
    assert re.fullmatch(r"Forward: \S+ \(3 levels, 4 nodes\)", lines[0])
    assert re.fullmatch(r"  Level 0  \S+", lines[1])
    assert re.fullmatch(r'    linear_1 "a" "b" +\S+', lines[2])
    assert re.fullmatch(r"  Level 1  \S+  2 nodes", lines[3])
    assert [line.split()[0] for line in lines[4:6]] == ["linear_2", "linear_3"]
    assert re.fullmatch(r"  Level 2  \S+", lines[6]) and lines[7].split()[0] == "merge_4"


def test_the_profiling_clock_waits_for_cuda_when_cuda_is_in_use(monkeypatch):
    model = fl.FlowBuilder(nn.Linear(2, 2)).through(nn.ReLU()).build()
    model.enable_profiling()
    syncs = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: syncs.append(1))
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    model(torch.randn(1, 2))
    assert syncs == []  # CUDA never used: no synchronisation
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    model(torch.randn(1, 2))
    # one clock read at the start, then one before and one after each of the 2 nodes, and
    # one at the end: every read waits for queued kernels
    assert len(syncs) == 6
    model.disable_profiling()
    model(torch.randn(1, 2))
    assert len(syncs) == 6  # the plain forward never synchronises
