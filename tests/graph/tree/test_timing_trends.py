"""Timing trends, trend files, collect_with, named_buffers_at, end_sequence, profiling descent."""

from __future__ import annotations

import csv
import re
import shutil

import pytest
import torch
from torch import nn

import flodl as fl


def profiled_model() -> fl.Graph:
    enc = fl.FlowBuilder(nn.Linear(4, 8)).tag("h").through(nn.ReLU()).label("enc").build()
    model = fl.FlowBuilder(enc).through(nn.Linear(8, 2)).tag("head").build()
    model.enable_profiling()
    return model


def train(model: fl.Graph, epochs: int = 3, steps: int = 4) -> None:
    for _ in range(epochs):
        for _ in range(steps):
            model(torch.randn(5, 4))
            model.end_step()
        model.end_epoch()


def test_timing_trends_one_value_per_epoch_for_every_tagged_node():
    model = profiled_model()
    train(model, epochs=3)
    head = model.timing_trend("head")
    assert len(head) == 3 and all(v > 0 for v in head.values)
    assert len(model.timing_trend("enc.h")) == 3  # nested graphs' tags as paths
    group = model.timing_trends("head", "enc.h")
    assert len(group) == 2
    model.reset_timing_trend("head")
    assert model.timing_trend("head").is_empty() and len(model.timing_trend("enc.h")) == 3
    with pytest.raises(fl.PathError):
        model.timing_trend("haed")


def test_no_profiling_no_timings_and_explicit_collection():
    model = profiled_model()
    model.disable_profiling()
    train(model, epochs=1)
    assert model.timing_trend("head").is_empty()
    assert model.collect_timings("head") == {}  # no profile
    model.enable_profiling()
    model(torch.randn(2, 4))
    assert set(model.collect_timings("head")) == {"head"}
    with pytest.raises(fl.PathError):
        model.collect_timings("nope")
    model.flush_timings()
    assert len(model.timing_trend("head")) == 1


def test_export_timing_trends_and_plot(tmp_path):
    model = profiled_model()
    with pytest.raises(fl.FlodlError, match="no timing data"):
        model.plot_timings_html(tmp_path / "t.html")
    train(model, epochs=2)
    rows = list(csv.reader(model.export_timing_trends(tmp_path / "t.csv").open()))
    assert rows[0] == ["epoch", "enc.h", "head"]
    assert [r[0] for r in rows[1:]] == ["1", "2"] and all(float(v) > 0 for v in rows[1][1:])
    only = list(csv.reader(model.export_timing_trends(tmp_path / "h.csv", ["head"]).open()))
    assert only[0] == ["epoch", "head"]
    page = model.plot_timings_html(tmp_path / "t.html", ["head"]).read_text()
    assert "timing trends (ms)" in page and '"head"' in page and "src=" not in page


def test_export_trends_and_write_log(tmp_path):
    model = profiled_model()
    with pytest.raises(fl.FlodlError, match="flush"):
        model.export_trends(tmp_path / "x.csv")
    with pytest.raises(fl.FlodlError, match="flush"):
        model.write_log(tmp_path / "x.log")
    for epoch, loss in enumerate([1.0, 0.5, 0.25]):
        model.record_scalar("loss", loss)
        if epoch:
            model.record_at("enc.aux", 10.0 * epoch)
        model.flush()
    rows = list(csv.reader(model.export_trends(tmp_path / "m.csv").open()))
    # enc.aux stays on the epochs it was flushed in (2 and 3), not moved up to 1 and 2
    assert rows == [["epoch", "enc.aux", "loss"], ["1", "", "1.0"], ["2", "10.0", "0.5"], ["3", "20.0", "0.25"]]  # fmt: skip
    log = model.write_log(tmp_path / "m.log", total_epochs=5, tags=["loss"]).read_text()
    lines = log.splitlines()
    assert lines[0] == "# flodl training log" and len(lines) == 4
    assert re.match(r"epoch   1  loss=1\.0000  \[.+  ETA .+\]$", lines[1])
    assert "enc.aux" not in log


def test_collect_with_each_reducer_and_the_epoch_mean():
    g = fl.FlowBuilder(nn.Identity()).tag("x").build()
    g(torch.tensor([[3.0, -4.0], [0.0, 1.0]]))
    got = {r: g.collect_with("x", r)["x"] for r in ("mean", "sum", "max", "min", "norm")}
    assert got == {"mean": 0.0, "sum": 0.0, "max": 3.0, "min": -4.0, "norm": pytest.approx(26**0.5)}
    g.flush()
    g.reset_trend()  # start over with the values above forgotten
    g(torch.tensor([1.0, 3.0]))
    g.collect_with(["x"], fl.Reduce.MAX)
    g(torch.tensor([5.0, 7.0]))
    g.collect_with(["x"], "max")
    g.flush()
    assert g.trend("x").values == (5.0,)  # (3 + 7) / 2: the mean over batches
    g(torch.tensor(2.5))
    assert g.collect_with("x", "norm") == {"x": 2.5}  # one element: taken as is
    with pytest.raises(ValueError, match="'mean', 'sum', 'max', 'min', 'norm'"):
        g.collect_with("x", "median")
    g(torch.zeros(0))
    with pytest.raises(ValueError, match="empty tensor"):
        g.collect_with("x", "sum")


def test_collect_with_groups_and_paths():
    enc = (
        fl.FlowBuilder(nn.Identity())
        .split(nn.Identity(), nn.Identity())
        .tag_group("heads")
        .merge(fl.MergeOp.ADD)
        .label("enc")
        .build()
    )
    model = fl.FlowBuilder(enc).build()
    model(torch.tensor([1.0, 2.0]))
    assert model.collect_with("enc.heads", "sum") == {"enc.heads_0": 3.0, "enc.heads_1": 3.0}
    with pytest.raises(fl.PathError):
        model.collect_with(["enc.nope"], "sum")
    assert model.subgraph("enc").collected("heads_0") == [3.0]


def test_named_buffers_at_tags_and_subgraphs():
    enc = fl.FlowBuilder(nn.Linear(2, 4)).through(nn.BatchNorm1d(4)).tag("bn").label("enc").build()
    model = fl.FlowBuilder(enc).through(nn.Linear(4, 1)).build()
    bn = dict(model.named_buffers_at("enc.bn"))
    assert set(bn) == {"running_mean", "running_var", "num_batches_tracked"}
    assert bn["running_var"] is enc.module_of(enc.tag_map["bn"]).running_var
    assert [n for n, _ in model.named_buffers_at("enc")] == [
        "bn.running_mean",
        "bn.running_var",
        "bn.num_batches_tracked",
    ]
    with pytest.raises(fl.PathError):
        model.named_buffers_at("enc.nb")


def test_end_sequence_forgets_state_end_step_keeps_it():
    g = fl.FlowBuilder().through(fl.nn.StateAdd()).using("s").tag("s").build()
    one = torch.ones(2)
    first = g(one)
    g.end_step()
    assert torch.equal(g(one), first + one)  # state carried across the step
    g.end_sequence()
    assert torch.equal(g(one), first)  # a new sequence starts from zeros


def test_profiling_descends_into_loop_bodies_and_gate_experts():
    body = fl.FlowBuilder(nn.Linear(4, 4)).tag("inner").build()
    expert = fl.FlowBuilder(nn.Linear(4, 4)).tag("e").build()
    g = (
        fl.FlowBuilder(nn.Linear(4, 4))
        .loop_body(body)
        .for_n(3)
        .gate(fl.nn.SoftmaxRouter(4, 2), expert, nn.Linear(4, 4))
        .build()
    )
    g.enable_profiling()
    g(torch.ones(2, 4))
    profile = g.profile()
    assert set(profile.children) == {"loop_2.body", "gate_3.experts.0"}
    assert profile.timing("loop_2.body.inner") > 0 and profile.timing("gate_3.experts.0.e") > 0
    assert "loop_2.body.inner" in profile.names()
    assert "[loop_2.body]" in str(profile)
    with pytest.raises(fl.PathError):
        profile.timing("loop_2.body.nope")


@pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz")
def test_monitor_watch_profiled_shows_the_heat_map():
    model = profiled_model()
    mon = fl.Monitor(1, stream=None, gpu=False)
    mon.watch_profiled(model)  # no forward yet: the plain graph
    plain = mon._svg
    assert plain and not re.search(r"\d+(us|ms)<", plain)
    model(torch.randn(3, 4))
    mon.watch_profiled(model)
    assert re.search(r"\d+(us|ms)", mon._svg) and mon._svg != plain
    mon.close()


def test_timing_flushes_by_tag_make_one_epoch():
    model = profiled_model()
    for _ in range(2):
        model(torch.ones(1, 4))
        model.end_step()
        model.flush_timings("head")
        model.flush_timings()  # the rest, and the epoch ends
    assert model._timing().flush_count == 2
    assert all(len(model.timing_trend(t)) == 2 for t in model._timing().history)
