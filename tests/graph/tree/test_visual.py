"""DOT (checked structurally through Graphviz's own parser), SVG, HTML pages."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest
import torch
from torch import nn

import flodl as fl
from flodl.nn.state import StateAdd
from tests.conftest import require

from .trees import composed, x


@pytest.fixture
def _graphviz():
    require(
        "graphviz", None if shutil.which("dot") else "no `dot` on PATH (apt-get install graphviz)"
    )


needs_dot = pytest.mark.usefixtures("_graphviz")


def parsed(dot_text: str) -> dict:
    """Graphviz's own parse of the DOT text (``dot -Tjson``): objects and edges by name."""
    out = subprocess.run(["dot", "-Tjson0"], input=dot_text, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    objects = doc.get("objects", [])
    names = {i: o["name"] for i, o in enumerate(objects)}
    edges = {(names[e["tail"]], names[e["head"]]): e for e in doc.get("edges", [])}
    clusters = {o["name"]: o for o in objects if o["name"].startswith("cluster")}
    nodes = {o["name"]: o for o in objects if not o["name"].startswith("cluster")}
    return {"nodes": nodes, "edges": edges, "clusters": clusters, "names": names}


@needs_dot
def test_dot_structure_nodes_edges_and_clusters():
    d = parsed(composed().dot())
    assert set(d["nodes"]) == {
        "input", "graph_1/linear_1", "graph_1/relu_2", "graph_1/linear_3", "linear_2", "output"
    }  # fmt: skip
    assert set(d["edges"]) == {
        ("input", "graph_1/linear_1"),
        ("graph_1/linear_1", "graph_1/relu_2"),
        ("graph_1/relu_2", "graph_1/linear_3"),
        ("graph_1/linear_3", "linear_2"),
        ("linear_2", "output"),
    }
    cluster = d["clusters"]["cluster_graph_1"]
    members = {d["names"][i] for i in cluster.get("nodes", [])}
    assert members == {"graph_1/linear_1", "graph_1/relu_2", "graph_1/linear_3"}
    assert "encoder" in cluster["label"]
    head = d["nodes"]["linear_2"]
    assert "#head" in head["label"] and "[10 params]" in head["label"]
    assert d["nodes"]["graph_1/relu_2"]["shape"] == "ellipse"


@needs_dot
def test_refs_and_forward_refs_point_at_real_nodes():
    model = (
        fl.FlowBuilder(nn.Linear(2, 2)).tag("a")
        .through(StateAdd()).using("memory")  # forward ref: previous call's 'memory'
        .through(nn.Linear(2, 2)).tag("memory")
        .through(StateAdd()).using("a")  # same-pass ref
        .build()
    )  # fmt: skip
    d = parsed(model.dot())
    edges = d["edges"]
    assert all(a in d["nodes"] and b in d["nodes"] for a, b in edges)  # no phantom nodes
    back = edges[("linear_3", "state_add_2")]
    assert back["style"] == "dotted" and "previous call" in back["label"]
    same = edges[("linear_1", "state_add_4")]
    assert same["style"] == "dashed" and "a" in same["label"]


@needs_dot
def test_svg_escapes_every_label():
    model = (
        fl.FlowBuilder(nn.Linear(2, 2)).tag("x<y&z")
        .through(lambda t: t * 2).label('<b>"odd"</b>').build()
    )  # fmt: skip
    text = model.svg()
    root = ET.fromstring(text)  # well-formed XML
    labels = "".join(root.itertext())
    assert "#x<y&z" in labels and "<lambda>" in labels and '<b>"odd"</b>' in labels


@needs_dot
def test_svg_writes_the_file(tmp_path):
    path = tmp_path / "g.svg"
    text = composed().svg(path)
    assert path.read_text() == text and text.lstrip().startswith("<?xml")


@needs_dot
def test_svg_with_profile_colours_by_time(tmp_path):
    model = composed()
    with pytest.raises(fl.FlodlError, match="enable_profiling"):
        model.svg_with_profile()
    model.enable_profiling()
    model(x())
    dot = fl.graph.visual.render_dot(model, model.profile())
    fills = re.findall(r'fillcolor="(#[0-9a-f]{6})"', dot)
    heat = {fl.graph.visual.heat(r) for r in (0.0, 1.0)}
    assert "#e74c3c" in fills  # the slowest node is red
    assert heat == {"#27ae60", "#e74c3c"}
    assert "forward" in dot
    ET.fromstring(model.svg_with_profile(tmp_path / "p.svg"))


def test_missing_graphviz_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without `dot`
    with pytest.raises(fl.GraphvizError, match="apt install graphviz"):
        composed().svg()


def test_failing_graphviz_reports_its_stderr(tmp_path, monkeypatch):
    fake = tmp_path / "dot"
    fake.write_text("#!/bin/sh\necho 'syntax error in line 1' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(fl.GraphvizError, match="dot exited with 3: syntax error"):
        composed().svg()


def no_urls(page: str) -> None:
    assert not re.search(r"(https?:)?//[a-z0-9]", page, re.IGNORECASE)
    assert "src=" not in page and "<link" not in page


def test_plot_html_is_self_contained_and_escapes_names(tmp_path):
    model = composed()
    for loss in (1.0, 0.5, float("nan")):
        model.record_scalar("loss</script><b>", loss)
        model.record_at("encoder.aux", 0.1)
        model.flush()
    page = model.plot_html(tmp_path / "curves.html").read_text()
    no_urls(page)
    assert "</script><b>" not in page
    data = json.loads(re.search(r'id="series">(.*?)</script>', page).group(1))
    assert data == [
        {"name": "loss</script><b>", "values": [1.0, 0.5, None]},
        {"name": "encoder.aux", "values": [0.1, 0.1, 0.1]},
    ]
    only = model.plot_html(tmp_path / "one.html", ["encoder.aux"]).read_text()
    assert '"encoder.aux"' in only and "loss" not in only


def test_plot_html_without_data_or_with_a_bad_name(tmp_path):
    with pytest.raises(fl.FlodlError, match="flush"):
        composed().plot_html(tmp_path / "x.html")
    with pytest.raises(fl.PathError):
        composed().plot_html(tmp_path / "x.html", ["nope"])
    assert not (tmp_path / "x.html").exists()


def test_html_view_needs_no_graphviz_and_has_collapsible_subgraphs():
    model = composed()
    model.freeze("encoder.hidden")
    page = model.html_view()
    no_urls(page)
    assert page.count("<details") == 1 and "encoder" in page and "#head" in page
    assert "(frozen)" in page
    lam = fl.FlowBuilder(nn.Linear(2, 2)).through(lambda t: t).tag("a<b").build()
    page = lam.html_view()
    assert "fn &lt;lambda&gt;" in page and "#a&lt;b" in page


def test_tree_and_param_summaries():
    model = composed()
    text = model.tree_summary()
    assert "=== Graph Tree ===" in text and "encoder [hash: " in text
    assert "=== Parameter Summary ===" in text and "(own)" in text and "trainable" in text
    assert "_plumbing" not in text  # internal tags are not shown from the parent
    model.freeze("encoder")
    assert "encoder [hash: " in model.tree_summary() and "* frozen" in model.tree_summary()
    assert "encoder: 32 (76.2%)  frozen" in model.param_summary()
    model.thaw("encoder")
    model.freeze("encoder.hidden")
    assert "2/4 tensors frozen" in model.param_summary()


def test_summary_shows_paths():
    text = composed().summary()
    assert "encoder.hidden" in text


def test_forward_of_a_graph_with_a_lambda_still_works():
    g = fl.FlowBuilder(nn.Linear(2, 2)).through(lambda t: t * 2).build()
    assert g(torch.ones(1, 2)).shape == (1, 2)


def test_rich_tree_escapes_markup_in_labels():
    import io

    from rich.console import Console

    child = fl.FlowBuilder(nn.Linear(2, 2)).tag("[red]t").label("[bold]enc").build()
    model = fl.FlowBuilder(child).build()
    model.freeze("[bold]enc")
    out = io.StringIO()
    Console(file=out, width=120, color_system=None).print(model.rich_tree())
    text = out.getvalue()
    assert "[bold]enc" in text and "#[red]t" in text and "frozen" in text


@needs_dot
def test_every_node_kind_renders_with_its_shape():
    model = (
        fl.FlowBuilder(nn.Linear(4, 4))
        .split(nn.Linear(4, 4), nn.Linear(4, 4)).merge(fl.MergeOp.CAT(-1))
        .through(nn.Linear(8, 4))
        .also(nn.Linear(4, 4))
        .loop_body(nn.Linear(4, 4)).for_n(2)
        .gate(fl.nn.SoftmaxRouter(4, 2), nn.Linear(4, 4), nn.Linear(4, 4))
        .map(nn.Linear(4, 4)).each()
        .through(nn.LayerNorm(4))
        .build()
    )  # fmt: skip
    d = parsed(model.dot())
    shapes = {name.split("_")[0]: node["shape"] for name, node in d["nodes"].items()}
    assert shapes["merge"] == "circle" and shapes["add"] == "circle"
    assert shapes["loop"] == "box3d" and shapes["gate"] == "diamond"
    assert shapes["map"] == "parallelogram" and shapes["layernorm"] == "box"
    assert "merge cat(dim=-1)" in d["nodes"]["merge_4"]["label"]
    assert all(a in d["nodes"] and b in d["nodes"] for a, b in d["edges"])
