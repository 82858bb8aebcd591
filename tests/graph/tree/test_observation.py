"""Observation across the tree: collect, record, flush (tree-wide), trends, latest_metrics."""

from __future__ import annotations

import csv
import io
import math
import re

import numpy as np
import pytest
import torch
from torch import nn

import flodl as fl

from .trees import composed, letter, x


def test_tagged_at_three_states():
    model = composed()
    assert model.tagged_at("encoder.hidden") is None  # not computed yet
    model(x())
    assert model.tagged_at("encoder.hidden").shape == (1, 4)
    assert model.tagged_at("head") is model.tagged("head")
    with pytest.raises(fl.PathError):
        model.tagged_at("encoder.hiden")  # wiring bug: an error
    with pytest.raises(fl.PathError, match="resolves to a subgraph, not a tag"):
        model.tagged_at("encoder")


def test_collect_takes_means_and_flush_averages_batches():
    g = fl.FlowBuilder(nn.Identity()).tag("v").build()
    for batch in ([1.0, 3.0], [4.0, 8.0]):
        g(torch.tensor(batch))
        assert g.collect("v") == {"v": sum(batch) / 2}
    assert g.collected("v") == [2.0, 6.0]
    g.flush()
    assert g.trend("v").values == (4.0,)
    assert g.collected("v") == [] and g.flush_count == 1


def test_collect_paths_land_in_the_child_and_groups_expand():
    model = composed()
    model(x(3))
    model.collect("encoder.hidden")
    assert model.subgraph("encoder").collected("hidden") != []
    branches = (
        fl.FlowBuilder(nn.Identity()).split(nn.Identity(), nn.Identity()).tag_group("b")
        .merge(fl.MergeOp.ADD).build()
    )  # fmt: skip
    branches(torch.ones(2))
    assert set(branches.collect("b")) == {"b_0", "b_1"}


def test_a_group_reached_through_a_child_path_expands():
    child = (
        fl.FlowBuilder(nn.Identity()).split(nn.Identity(), nn.Identity()).tag_group("grp")
        .merge(fl.MergeOp.ADD).label("enc").build()
    )  # fmt: skip
    model = fl.FlowBuilder(child).build()
    for v in (2.0, 1.0):
        model(torch.full((3,), v))
        assert model.collect("enc.grp") == {"enc.grp_0": v, "enc.grp_1": v}
        model.flush("enc.grp")
    assert child.trend("grp_0").values == (2.0, 1.0)
    assert model.trends("enc.grp").names == ["enc.grp_0", "enc.grp_1"]
    assert model.trends("enc.grp").all_improving()
    with pytest.raises(fl.PathError, match=r"enc\.nope"):
        model.collect("enc.nope")
    with pytest.raises(fl.PathError):
        model.collect("nope.grp")


def test_collect_bad_input_changes_nothing():
    model = composed()
    with pytest.raises(ValueError, match="run a forward pass"):
        model.collect("head")
    model(x())
    with pytest.raises(fl.PathError):
        model.collect("head", "nope")  # 'head' is valid but must not be appended
    assert model.collected("head") == []
    with pytest.raises(fl.PathError, match="not a tag"):
        model.collect("encoder")
    with pytest.raises(fl.PathError):
        model.collect()


def test_numpy_numbers_are_numbers():
    # Metrics from NumPy or scikit-learn arrive as NumPy scalars and 0-d arrays.
    g = composed()
    g.record_scalar("acc", np.float32(0.5))
    g.record_scalar("acc", np.int64(1))
    g.record_scalar("acc", np.array(0.25))
    g.record("acc", np.array([0.5, 0.75]))
    assert g.collected("acc") == [0.5, 1.0, 0.25, 0.5, 0.75]
    with pytest.raises(ValueError, match=r"NumPy array of shape \[2\]"):
        g.record_scalar("acc", np.array([0.5, 0.75]))
    with pytest.raises(TypeError, match="expected a number, got bool"):
        g.record_scalar("acc", np.bool_(True))


@pytest.mark.parametrize("collect_first", [True, False])
def test_a_tags_values_and_recorded_numbers_never_share_a_metric(collect_first):
    # collect("out") then record_scalar("out", loss) averaged an activation with a loss.
    g = fl.FlowBuilder(nn.Linear(2, 2)).tag("h").through(nn.Linear(2, 1)).tag("out").build()
    g(torch.randn(4, 2))
    if collect_first:
        g.collect("out")
        with pytest.raises(ValueError, match="record it under another name"):
            g.record_scalar("out", 100.0)
        with pytest.raises(ValueError, match="record it under another name"):
            g.record("out", [1.0, 2.0])
    else:
        g.record_scalar("out", 100.0)
        with pytest.raises(ValueError, match="already holds numbers recorded"):
            g.collect("h", "out")
        assert g.collected("h") == []  # nothing of a refused call is kept
    assert len(g.collected("out")) == 1
    g.flush()
    g.reset_trend("out")  # a forgotten metric may be fed the other way
    g.record_scalar("out", 1.0) if collect_first else g.collect("out")


def test_record_scalar_accepts_numbers_and_one_element_tensors_only():
    g = composed()
    g.record_scalar("loss", torch.tensor(0.5))
    g.record_scalar("loss", 1)
    g.record("loss", [0.25, 0.25])
    assert g.collected("loss") == [0.5, 1.0, 0.25, 0.25]
    with pytest.raises(ValueError, match=r"shape \[2\]"):
        g.record_scalar("loss", torch.ones(2))
    with pytest.raises(TypeError):
        g.record_scalar("loss", "0.1")  # type: ignore[arg-type]
    with pytest.raises(fl.PathError, match="use record_at"):
        g.record_scalar("encoder.loss", 0.1)
    g.record("loss", torch.tensor([0.5, 0.75]))  # a 1-D tensor is several numbers
    for one in (0.1, 3, torch.tensor(0.1)):  # record takes several: says which call takes one
        with pytest.raises(TypeError, match=r"for one number use record_scalar\('loss', value\)"):
            g.record("loss", one)  # type: ignore[arg-type]
    assert g.collected("loss") == [0.5, 1.0, 0.25, 0.25, 0.5, 0.75]


def test_record_at_then_child_flush():
    model = composed()
    model.record_at("encoder.loss", 1.0)
    model.record_at("encoder.loss", 2.0)
    model.subgraph("encoder").flush()
    assert model.trend_at("encoder.loss").values == (1.5,)
    assert model.trend("encoder.loss").values == (1.5,)
    with pytest.raises(fl.PathError):
        model.record_at("encodr.loss", 1.0)
    with pytest.raises(fl.PathError, match="not a subgraph"):
        model.record_at("head.loss", 1.0)


def recorded() -> fl.Graph:
    """A composed model with one value buffered at the root and one in the child."""
    model = composed()
    model.record_scalar("total_loss", 1.0)
    model.record_at("encoder.ce", 0.5)
    return model


def test_root_flush_flushes_the_whole_tree():
    model = recorded()
    model.flush()
    child = model.subgraph("encoder")
    assert model.flush_count == 1 and child.flush_count == 1
    assert len(model.trend("total_loss")) == 1 and len(child.trend("ce")) == 1
    assert model.latest_metrics() == {"total_loss": 1.0, "encoder.ce": 0.5}
    assert model.latest_metrics_local() == {"total_loss": 1.0}


def test_double_flush_is_safe():
    model = composed()
    model.record_at("encoder.ce", 0.5)
    model.subgraph("encoder").flush()
    model.flush()
    child = model.subgraph("encoder")
    assert child.flush_count == 1 and len(child.trend("ce")) == 1
    assert model.flush_count == 0  # nothing of its own to flush


def test_flush_local_does_not_recurse():
    model = recorded()
    model.flush_local()
    child = model.subgraph("encoder")
    assert child.flush_count == 0 and child.collected("ce") == [0.5]


def test_named_flush_flushes_exactly_those_and_rejects_unknown_names():
    model = composed()
    model.record_scalar("a", 1.0)
    model.record_scalar("b", 2.0)
    model.record_at("encoder.c", 3.0)
    with pytest.raises(fl.PathError, match="'z'"):
        model.flush("a", "z")
    assert model.collected("a") == [1.0]  # nothing flushed
    model.flush("a", "encoder.c")
    assert model.latest_metrics() == {"a": 1.0, "encoder.c": 3.0}
    assert model.collected("b") == [2.0]


def test_multi_level_metrics_have_dotted_names():
    model = letter()
    model.record_at("letter.read.hidden_loss", 0.1)
    model.record_at("letter.mid_loss", 0.2)
    model.record_scalar("loss", 0.5)
    model.record_scalar("loss", 0.3)
    model.end_epoch()
    assert model.latest_metrics() == pytest.approx(
        {"loss": 0.4, "letter.mid_loss": 0.2, "letter.read.hidden_loss": 0.1}
    )
    assert list(model.latest_metrics()) == ["loss", "letter.mid_loss", "letter.read.hidden_loss"]
    assert model.epoch_count == 1


def test_trend_of_an_unknown_name_raises_but_an_unflushed_tag_is_empty():
    model = composed()
    assert model.trend("head").is_empty()
    model.record_scalar("loss", 1.0)
    assert model.trend("loss").is_empty()  # recorded, not flushed yet
    with pytest.raises(fl.PathError) as err:
        model.trend("los")
    assert "loss" in err.value.suggestions


def test_trends_expand_groups_and_reset_trend():
    g = (
        fl.FlowBuilder(nn.Identity()).split(nn.Identity(), nn.Identity()).tag_group("b")
        .merge(fl.MergeOp.ADD).build()
    )  # fmt: skip
    for v in (3.0, 2.0, 1.0):
        g(torch.full((2,), v))
        g.collect("b")
        g.flush()
    group = g.trends("b")
    assert group.names == ["b_0", "b_1"] and group.all_improving()
    g.reset_trend("b_0")
    assert g.trend("b_0").is_empty() and len(g.trend("b_1")) == 3
    with pytest.raises(fl.PathError):
        g.reset_trend("nope")
    g.reset_trend()
    assert g.trend("b_1").is_empty()


def test_eta_from_flush_pace():
    g = composed()
    assert g.eta(10) == 0.0
    g.record_scalar("loss", 1.0)
    g.flush()
    assert g.eta(10) == pytest.approx(g.flush_times[-1] * 9)
    assert g.eta(1) == 0.0


def test_metrics_survive_deepcopy_and_pickle():
    import copy
    import pickle

    g = composed()
    g.record_scalar("loss", 1.0)
    g.flush()
    for clone in (copy.deepcopy(g), pickle.loads(pickle.dumps(g))):
        assert clone.latest_metrics() == {"loss": 1.0}


def test_monitor_logs_latest_metrics_of_the_tree():
    model = composed()
    mon = fl.Monitor(2, stream=io.StringIO(), gpu=False)
    try:
        for epoch in range(2):
            for _ in range(3):
                loss = model(x(4)).pow(2).mean()
                model.record_scalar("loss", loss)
                model.record_at("encoder.aux", 0.5 * epoch)
            model.end_epoch()
            mon.log(epoch, 0.01, model)
        history = mon.history
        assert list(history[0].metrics) == ["loss", "encoder.aux"]
        assert history[1].metrics["encoder.aux"] == 0.5
        assert history[1].metrics["loss"] == model.trend("loss").last()
    finally:
        mon.close()


def test_a_metric_flushed_in_some_epochs_stays_on_them_and_is_never_logged_stale(tmp_path):
    g = fl.FlowBuilder(nn.Linear(2, 2)).build()
    mon = fl.Monitor(4, stream=None, gpu=False)
    try:
        for epoch in range(4):
            g.record_scalar("loss", 1.0 / (epoch + 1))
            if epoch % 2 == 1:  # validation every other epoch
                g.record_scalar("val", 10.0 * epoch)
            g.end_epoch()
            mon.log(epoch, 0.1, g)
    finally:
        mon.close()
    assert [r.metrics for r in mon.history] == [
        {"loss": 1.0},
        {"loss": 0.5, "val": 10.0},
        {"loss": 1 / 3},  # not epoch 2's val again
        {"loss": 0.25, "val": 30.0},
    ]
    assert g.flush_count == 4 and g.trend("val").values == (10.0, 30.0)
    rows = list(csv.reader(g.export_trends(tmp_path / "t.csv").open()))
    assert [row[2] for row in rows] == ["val", "", "10.0", "", "30.0"]
    lines = g.write_log(tmp_path / "t.log").read_text().splitlines()[1:]
    assert ["val=" in line for line in lines] == [False, True, False, True]
    assert "val=30.0000" in lines[3]


def test_children_flushed_from_the_root_share_its_epochs():
    model = composed()
    for epoch in range(3):
        model.record_scalar("loss", float(epoch))
        if epoch == 1:
            model.record_at("encoder.aux", 5.0)
        model.end_epoch()
    assert model.latest_metrics() == {"loss": 2.0}  # aux belongs to epoch 2 only
    child = model.subgraph("encoder")
    assert child.flush_count == model.flush_count == 3
    assert model._epoch_histories() == {"loss": {0: 0.0, 1: 1.0, 2: 2.0}, "encoder.aux": {1: 5.0}}


def test_flushing_metric_by_metric_counts_one_epoch_per_epoch(tmp_path):
    g = fl.FlowBuilder(nn.Linear(2, 2)).build()
    for epoch in range(3):
        g.record_scalar("loss", 1.0 + epoch)
        g.record_scalar("acc", 0.5)
        g.flush("loss")
        g.flush("acc")
        assert g.latest_metrics() == {"loss": 1.0 + epoch, "acc": 0.5}
    assert g.flush_count == 3 and len(g.flush_times) == 3
    assert g.eta(4) == pytest.approx(g.flush_times[-1] / 3)
    lines = g.write_log(tmp_path / "g.log", total_epochs=6).read_text().splitlines()[1:]
    assert len(lines) == 3 and all("ETA" in line for line in lines)
    # end_epoch() after flushing by hand: nothing left to flush, the epoch ends, no new one
    g.record_scalar("loss", 9.0)
    g.flush("loss")
    g.end_epoch()
    assert g.flush_count == 4
    g.record_scalar("acc", 0.25)
    g.flush("acc")  # by name, after end_epoch(): acc joins the epoch just ended (it had none)
    assert g.flush_count == 4 and g.latest_metrics() == {"loss": 9.0, "acc": 0.25}
    g.record_scalar("lr", 0.1)
    g.end_epoch()  # no names, and the latest epoch was ended: a new one
    assert g.flush_count == 5 and g.latest_metrics() == {"lr": 0.1}


def test_a_root_with_metrics_only_in_a_child_gets_epoch_times_and_durations(tmp_path):
    model = composed()
    for epoch in range(2):
        model.record_at("encoder.aux", float(epoch))
        model.end_epoch()
    assert model.flush_count == 2 and len(model.flush_times) == 2 and model.eta(4) > 0
    lines = model.write_log(tmp_path / "m.log", total_epochs=4).read_text().splitlines()[1:]
    assert len(lines) == 2 and all(re.search(r"\[.+  ETA .+\]$", line) for line in lines)


@pytest.mark.parametrize(
    ("values", "mean"),
    [
        ([math.inf, -math.inf], math.nan),
        ([math.inf, 1.0], math.inf),
        ([1e308, 1e308, -math.inf], -math.inf),
        ([math.nan, 1.0], math.nan),
        ([1e308, 1e308], 1e308),  # the sum overflows, the mean does not
    ],
)
def test_non_finite_and_overflowing_values_flush_like_floats_and_lose_nothing(values, mean):
    model = composed()
    model.record("loss", values)
    model.record_scalar("ok", 1.0)
    model.record_at("encoder.aux", 2.0)
    model.end_epoch()
    got = model.trend("loss").values
    assert len(got) == 1 and (math.isnan(got[0]) if math.isnan(mean) else got[0] == mean)
    assert model.collected("loss") == [] and model.flush_count == 1 and model.epoch_count == 1
    assert model.latest_metrics()["ok"] == 1.0 and model.latest_metrics()["encoder.aux"] == 2.0


def test_a_graph_pickled_before_values_kept_their_epoch_goes_on_counting():
    import pickle

    g = composed()
    g.record_scalar("loss", 1.0)
    g.flush()
    del g._metrics.__dict__["epochs"], g._metrics.__dict__["ended"]  # as an older flodl left it
    clone = pickle.loads(pickle.dumps(g))
    assert clone.latest_metrics() == {"loss": 1.0}
    clone.record_scalar("loss", 2.0)
    clone.end_epoch()
    assert clone._epoch_histories() == {"loss": {0: 1.0, 1: 2.0}} and clone.flush_count == 2


@pytest.mark.parametrize("close", ["end_epoch", "flush"])
def test_validation_flushed_by_name_after_the_epoch_ended_belongs_to_that_epoch(tmp_path, close):
    # train, end the epoch, validate, flush the validation metric, log: one epoch, both metrics
    g = fl.FlowBuilder(nn.Linear(2, 2)).build()
    mon = fl.Monitor(3, stream=None, gpu=False)
    try:
        for epoch in range(3):
            g.record_scalar("loss", 1.0 / (epoch + 1))
            getattr(g, close)()
            g.record_scalar("val_loss", 2.0 / (epoch + 1))
            g.flush("val_loss")
            mon.log(epoch, 0.1, g)
    finally:
        mon.close()
    assert [r.metrics for r in mon.history] == [
        {"loss": 1.0, "val_loss": 2.0},
        {"loss": 0.5, "val_loss": 1.0},
        {"loss": 1 / 3, "val_loss": 2 / 3},
    ]
    assert g.flush_count == 3 and len(g.flush_times) == 3
    assert g._epoch_histories() == {
        "loss": {0: 1.0, 1: 0.5, 2: 1 / 3},
        "val_loss": {0: 2.0, 1: 1.0, 2: 2 / 3},
    }
    rows = list(csv.reader(g.export_trends(tmp_path / "t.csv").open()))
    assert rows[0] == ["epoch", "loss", "val_loss"] and len(rows) == 4
    assert rows[1] == ["1", "1.0", "2.0"] and rows[2] == ["2", "0.5", "1.0"]
    lines = g.write_log(tmp_path / "t.log").read_text().splitlines()[1:]
    assert len(lines) == 3 and all("loss=" in line and "val_loss=" in line for line in lines)


def test_validation_every_other_epoch_flushed_after_end_epoch_stays_on_its_epochs():
    g = fl.FlowBuilder(nn.Linear(2, 2)).build()
    for epoch in range(4):
        g.record_scalar("loss", float(epoch))
        g.end_epoch()
        if epoch % 2 == 1:
            g.record_scalar("val", 10.0 * epoch)
            g.flush("val")
        assert set(g.latest_metrics()) == ({"loss", "val"} if epoch % 2 else {"loss"})
    assert g.flush_count == 4
    assert g._epoch_histories()["val"] == {1: 10.0, 3: 30.0}


@pytest.mark.parametrize("child_flush", ["flush_local", "flush"])
def test_a_child_flushed_on_its_own_then_the_root_counts_one_epoch(child_flush):
    model = composed()
    child = model.subgraph("encoder")
    for epoch in range(3):
        model.record_scalar("loss", float(epoch))
        child.record_scalar("aux", 10.0 * epoch)
        getattr(child, child_flush)()
        model.flush()
        assert model.flush_count == child.flush_count == epoch + 1
        assert model.latest_metrics() == {"loss": float(epoch), "encoder.aux": 10.0 * epoch}
    assert len(model.flush_times) == 3
    assert model._epoch_histories() == {
        "loss": {0: 0.0, 1: 1.0, 2: 2.0},
        "encoder.aux": {0: 0.0, 1: 10.0, 2: 20.0},
    }


def test_a_child_metric_of_some_epochs_flushed_by_the_child_first_stays_on_them():
    model = composed()
    child = model.subgraph("encoder")
    for epoch in range(4):
        model.record_scalar("loss", float(epoch))
        if epoch % 2 == 1:
            child.record_scalar("aux", float(epoch))
            child.flush_local()  # the child's own flush does not end the root's epoch
        model.end_epoch()
    assert model.flush_count == 4
    assert model._epoch_histories()["encoder.aux"] == {1: 1.0, 3: 3.0}
    assert model.latest_metrics() == {"loss": 3.0, "encoder.aux": 3.0}
