"""Interoperability with the Rust original, checked against an independent model of its formats.

``tests/checkpoint/rust_original.py`` re-implements, from the original's source and without
flodl, its checkpoint reader/writer, its graph description (node ids, edges, Kahn order,
structural hash, entry names) and its optimizer streams. Files "from Rust" come from there.
"""

from __future__ import annotations

import gzip

import pytest
import torch
from torch import nn

import flodl as fl
from tests.checkpoint import rust_original as ro


def _pair(build):
    """The same architecture twice over shared torch modules: (flodl graph, original's graph)."""
    torch.manual_seed(0)
    return build()


def chain():
    a, b, c = nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(8, 2)
    norm = nn.BatchNorm1d(8)
    g = fl.FlowBuilder(a).tag("hidden").through(nn.ReLU()).also(b).through(norm).through(c).build()
    r = (
        ro.RustFlow(ro.Module.of(a))
        .tag("hidden")
        .through(ro.Module.of(nn.ReLU()))
        .also(ro.Module.of(b))
        .through(ro.Module.of(norm))
        .through(ro.Module.of(c))
        .build()
    )
    return g, r


def branches():
    x, y, head = nn.Linear(3, 5), nn.Linear(3, 5), nn.Linear(5, 1)
    fork = nn.Linear(3, 2)
    g = (
        fl.FlowBuilder()
        .fork(fork)
        .tag("aux")
        .split(x, y)
        .merge(fl.MergeOp.MEAN)
        .through(nn.GELU())
        .through(head)
        .tag("out")
        .build()
    )
    r = (
        ro.RustFlow(ro.Module.of(nn.Identity()))
        .fork(ro.Module.of(fork))
        .tag("aux")
        .split(ro.Module.of(x), ro.Module.of(y))
        .merge()
        .through(ro.Module.of(nn.GELU()))
        .through(ro.Module.of(head))
        .tag("out")
        .build()
    )
    return g, r


def nested():
    inner_a, inner_b, head = nn.Linear(4, 6), nn.Linear(6, 6), nn.Linear(6, 3)
    inner = fl.FlowBuilder(inner_a).through(nn.Tanh()).through(inner_b).label("enc").build()
    g = fl.FlowBuilder(inner).through(head).build()
    rust_inner = (
        ro.RustFlow(ro.Module.of(inner_a))
        .through(ro.Module.of(nn.Tanh()))
        .through(ro.Module.of(inner_b))
        .build()
    )
    r = ro.RustFlow(ro.Module.nested(rust_inner)).through(ro.Module.of(head)).build()
    return g, r


def mixed():
    embed, conv, norm = nn.Embedding(10, 4), nn.Conv2d(2, 3, 3), nn.LayerNorm(4)
    skip, main = nn.Linear(4, 4), nn.Linear(4, 4)
    a, b = nn.Linear(4, 4), nn.Linear(4, 4)
    shared = nn.Linear(4, 4)  # one module used twice: its parameters are saved once
    g = (
        fl.FlowBuilder(embed)
        .through(norm)
        .also_with(skip, main)
        .tag("res")
        .split(a, b)
        .tag_group("heads")
        .merge(fl.MergeOp.ADD)
        .through(shared)
        .through(nn.Dropout(0.1))
        .through(shared)
        .fork(conv)
        .build()
    )
    r = (
        ro.RustFlow(ro.Module.of(embed))
        .through(ro.Module.of(norm))
        .also_with(ro.Module.of(skip), ro.Module.of(main))
        .tag("res")
        .split(ro.Module.of(a), ro.Module.of(b))
        .tag_group("heads")
        .merge()
        .through(ro.Module.of(shared))
        .through(ro.Module.of(nn.Dropout(0.1)))
        .through(ro.Module.of(shared))
        .fork(ro.Module.of(conv))
        .build()
    )
    return g, r


GRAPHS = [chain, branches, nested, mixed]


@pytest.mark.parametrize("build", GRAPHS, ids=lambda f: f.__name__)
def test_rust_hash_matches_the_originals_algorithm(build):
    g, r = _pair(build)
    assert g.structural_hash(scheme="rust") == r.structural_hash()
    assert g.structural_hash(scheme="rust") != g.structural_hash()  # the default scheme differs


def test_rust_hash_follows_the_architecture():
    g1, _ = _pair(chain)
    g2 = fl.FlowBuilder(nn.Linear(4, 8)).tag("renamed").through(nn.ReLU()).build()
    g3 = fl.FlowBuilder(nn.Linear(4, 8)).tag("hidden").through(nn.ReLU()).build()
    g4 = fl.FlowBuilder(nn.Linear(4, 9)).tag("hidden").through(nn.ReLU()).build()
    hashes = {g.structural_hash(scheme="rust") for g in (g1, g2, g3, g4)}
    assert len(hashes) == 4


@pytest.mark.parametrize("build", GRAPHS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("suffix", [".fdl", ".fdl.gz"])
def test_hashed_rust_checkpoint_loads_under_strict_hash(tmp_path, build, suffix):
    g, r = _pair(build)
    trained = {id(t): torch.randn_like(t) for _, t in [*r.named_parameters(), *r.named_buffers()]}
    path = tmp_path / f"rust{suffix}"
    ro.save_checkpoint_file(
        path,
        [(n, trained[id(t)]) for n, t in r.named_parameters()],
        [(n, trained[id(t)].abs()) for n, t in r.named_buffers()],
        r.structural_hash(),
    )
    report = g.load_checkpoint(path)  # strict_hash=True by default
    assert not report.skipped and not report.mismatches
    assert set(report.missing) <= {n for n, _ in g.named_buffers() if "num_batches" in n}
    mine = dict([*g.named_parameters(), *g.named_buffers()])
    for (name, t), (_, t_again) in zip(r.named_parameters(), r.named_parameters(), strict=True):
        assert t is t_again
        assert torch.equal(t, trained[id(t)]), name  # shared modules: loaded in place
    assert len(report.loaded) == len(r.named_parameters()) + len(r.named_buffers())
    assert all(name in mine for name in report.loaded)
    assert not report.verified and "not verified: no integrity trailer" in repr(report)


@pytest.mark.parametrize("build", GRAPHS, ids=lambda f: f.__name__)
def test_rust_compatible_graph_save_is_the_originals_file(tmp_path, build):
    g, r = _pair(build)
    g.save_checkpoint(tmp_path / "mine.fdl", rust_compatible=True)
    r.save_checkpoint(tmp_path / "theirs.fdl")
    assert (tmp_path / "mine.fdl").read_bytes() == (tmp_path / "theirs.fdl").read_bytes()
    parsed = ro.read_checkpoint_file(tmp_path / "mine.fdl")
    assert parsed.trailing == 0 and parsed.version == 2
    assert parsed.structural_hash.hex() == r.structural_hash()
    assert list(parsed.entries) == [n for n, _ in [*r.named_parameters(), *r.named_buffers()]]
    # and flodl reads its own Rust-compatible file back under strict checking
    assert g.load_checkpoint(tmp_path / "mine.fdl").loaded


def test_rust_compatible_gz_parses_with_the_originals_reader(tmp_path):
    g, r = _pair(chain)
    g.save_checkpoint(tmp_path / "m.fdl.gz", rust_compatible=True)
    parsed = ro.read_checkpoint_file(tmp_path / "m.fdl.gz")
    assert parsed.trailing == 0 and parsed.structural_hash.hex() == r.structural_hash()


def test_rust_compatible_save_checkpoint_writes_the_originals_bytes(tmp_path):
    entries = [("a/weight", torch.randn(2, 3)), ("a/bias", torch.randn(3).double())]
    buffers = [("n/count", torch.tensor([3], dtype=torch.int64))]
    digest = "ab" * 32
    fl.save_checkpoint(tmp_path / "m.fdl", entries, buffers, digest, rust_compatible=True)
    expected = ro.checkpoint_bytes(entries, buffers, digest)
    assert (tmp_path / "m.fdl").read_bytes() == expected
    for dtype in (torch.float16, torch.bfloat16, torch.int32):
        fl.save_checkpoint(
            tmp_path / "d.fdl", {"x": torch.ones(2, dtype=dtype)}, rust_compatible=True
        )
        assert ro.read_checkpoint_file(tmp_path / "d.fdl").entries["x"].dtype == dtype


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8, torch.int16])
def test_rust_compatible_refuses_dtypes_the_original_lacks(tmp_path, dtype):
    path = tmp_path / "m.fdl"
    path.write_bytes(b"previous")
    with pytest.raises(fl.CheckpointError, match=r"'mask'.*Rust original.*dtype"):
        fl.save_checkpoint(
            path, {"w": torch.ones(2), "mask": torch.ones(2, dtype=dtype)}, rust_compatible=True
        )
    assert path.read_bytes() == b"previous"  # nothing written
    fl.save_checkpoint(path, {"mask": torch.ones(2, dtype=dtype)})  # flodl's own format: fine


def test_rust_compatible_refuses_gzip_the_name_does_not_announce(tmp_path):
    with pytest.raises(fl.CheckpointError, match=r"does not end in \.gz"):
        fl.save_checkpoint(
            tmp_path / "m.fdl", {"w": torch.ones(1)}, compress=True, rust_compatible=True
        )
    with pytest.raises(fl.CheckpointError, match=r"ends in \.gz"):
        fl.save_checkpoint(
            tmp_path / "m.fdl.gz", {"w": torch.ones(1)}, compress=False, rust_compatible=True
        )
    with pytest.raises(fl.CheckpointError, match="file object"):
        import io

        fl.save_checkpoint(io.BytesIO(), {"w": torch.ones(1)}, compress=True, rust_compatible=True)
    with pytest.raises(fl.CheckpointError, match="checksum"):
        fl.save_checkpoint(
            tmp_path / "m.fdl", {"w": torch.ones(1)}, checksum=True, rust_compatible=True
        )
    assert not list(tmp_path.iterdir())


def test_compress_without_gz_name_warns_in_flodl_mode(tmp_path):
    with pytest.warns(fl.CheckpointWarning, match=r"does not end in \.gz"):
        fl.save_checkpoint(tmp_path / "m.fdl", {"w": torch.ones(1)}, compress=True)
    assert (tmp_path / "m.fdl").read_bytes()[:2] == b"\x1f\x8b"
    assert fl.read_checkpoint(tmp_path / "m.fdl")["w"].tolist() == [1.0]


def test_node_without_rust_counterpart_raises_naming_it(tmp_path):
    g = fl.FlowBuilder(nn.Linear(2, 2)).through(lambda t: t * 2).through(nn.Linear(2, 2)).build()
    with pytest.raises(fl.RustMappingError, match=r"node 'fn_2'.*no counterpart"):
        g.structural_hash(scheme="rust")
    with pytest.raises(fl.RustMappingError, match="fn_2"):
        g.save_checkpoint(tmp_path / "m.fdl", rust_compatible=True)
    assert not (tmp_path / "m.fdl").exists()
    looped = fl.FlowBuilder(nn.Linear(2, 2)).loop_body(nn.Linear(2, 2)).for_n(2).build()
    with pytest.raises(fl.RustMappingError, match="loop_2"):
        looped.structural_hash(scheme="rust")
    with pytest.raises(ValueError, match="scheme"):
        looped.structural_hash(scheme="md5")
    # a graph without a Rust hash still loads its own files
    looped.save_checkpoint(tmp_path / "own.fdl")
    assert looped.load_checkpoint(tmp_path / "own.fdl").complete


def test_rust_file_for_another_graph_is_refused_with_the_names(tmp_path):
    _, r = _pair(chain)
    other = fl.FlowBuilder(nn.Linear(4, 8)).tag("hidden").through(nn.Linear(8, 2)).build()
    r.save_checkpoint(tmp_path / "rust.fdl")
    before = [p.clone() for p in other.parameters()]
    with pytest.raises(fl.CheckpointError, match="architecture mismatch") as err:
        other.load_checkpoint(tmp_path / "rust.fdl")
    assert "hidden/weight" in str(err.value) and "Rust original" in str(err.value)
    assert all(torch.equal(a, b) for a, b in zip(before, other.parameters(), strict=True))


# ------------------------------------------------------------------------- optimizer streams


def _params():
    torch.manual_seed(1)
    return [
        nn.Parameter(torch.randn(3, 2)),
        nn.Parameter(torch.randn(2)),
        nn.Parameter(torch.randn(4)),
    ]


def _stepped(opt, params, steps=2):
    for _ in range(steps):
        opt.zero_grad()
        sum((p * p).sum() for p in params[:2]).backward()  # the third never gets a gradient
        opt.step()
    return opt


def test_rust_adam_stream_loads_and_round_trips(tmp_path):
    params = _params()
    m = [torch.randn(3, 2), torch.randn(2), None]
    v = [torch.rand(3, 2), torch.rand(2), None]
    data = ro.adam_state(0.003, 7, m, v)
    (tmp_path / "adam.state").write_bytes(data)
    opt = torch.optim.Adam(params, lr=0.1)
    fl.load_optimizer_state(opt, tmp_path / "adam.state")
    assert opt.param_groups[0]["lr"] == 0.003
    assert torch.equal(opt.state[params[0]]["exp_avg"], m[0])
    assert torch.equal(opt.state[params[1]]["exp_avg_sq"], v[1])
    assert int(opt.state[params[0]]["step"]) == 7 and params[2] not in opt.state
    fl.save_optimizer_state(opt, tmp_path / "again.state", format="rust")
    assert (tmp_path / "again.state").read_bytes() == data
    _stepped(opt, params, 1)  # the loaded state is usable
    assert int(opt.state[params[0]]["step"]) == 8


@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [
        (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01}),
        (torch.optim.SGD, {"lr": 0.1}),
        (torch.optim.Adam, {"lr": 0.01}),
        (torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.05}),
        (torch.optim.RMSprop, {"lr": 0.01, "alpha": 0.9, "momentum": 0.5, "weight_decay": 0.1}),
    ],
    ids=lambda x: getattr(x, "__name__", ""),
)
def test_flodl_rust_streams_parse_with_the_originals_reader(tmp_path, cls, kwargs):
    params = _params()
    opt = _stepped(cls(params, **kwargs), params)
    path = tmp_path / "opt.state.gz"
    fl.save_optimizer_state(opt, path, format="rust")
    parsed = ro.read_optimizer_state(cls.__name__, gzip.decompress(path.read_bytes()))
    assert parsed["lr"] == kwargs["lr"] and parsed["groups"] == []
    if cls is torch.optim.Adam or cls is torch.optim.AdamW:
        assert parsed["t"] == 2
        assert torch.equal(parsed["m"][0], opt.state[params[0]]["exp_avg"])
        assert parsed["m"][2] is None
    elif cls is torch.optim.RMSprop:
        assert (parsed["alpha"], parsed["momentum"]) == (0.9, 0.5)
        assert torch.equal(parsed["v"][1], opt.state[params[1]]["square_avg"])
    elif kwargs.get("momentum"):
        assert torch.equal(parsed["velocity"][0], opt.state[params[0]]["momentum_buffer"])
    else:
        assert parsed["velocity"] == [None, None, None]
    # round trip: a fresh optimizer continues exactly as the original one does
    fresh = cls(_params_like(params), **{**kwargs, "lr": 1.0})
    fl.load_optimizer_state(fresh, path)
    _stepped(opt, params, 1)
    _stepped(fresh, fresh.param_groups[0]["params"], 1)
    for a, b in zip(params, fresh.param_groups[0]["params"], strict=True):
        assert torch.equal(a, b)


def _params_like(params):
    # the same values the original optimizer's parameters hold now
    return [nn.Parameter(p.detach().clone()) for p in params]


def test_rust_streams_with_groups_and_settings(tmp_path):
    params = _params()
    v = [torch.rand(3, 2), None, torch.rand(4)]
    buf = [torch.randn(3, 2), None, torch.randn(4)]
    data = ro.rmsprop_state(0.5, 0.8, 1e-6, 0.02, 0.3, v, buf, [(0.5, 0, 2), (0.25, 2, 3)])
    (tmp_path / "rms.state").write_bytes(data)
    opt = torch.optim.RMSprop([{"params": params[:2]}, {"params": params[2:]}], lr=1.0)
    fl.load_optimizer_state(opt, tmp_path / "rms.state")
    assert [g["lr"] for g in opt.param_groups] == [0.5, 0.25]
    assert all(g["alpha"] == 0.8 and g["momentum"] == 0.3 for g in opt.param_groups)
    assert torch.equal(opt.state[params[2]]["momentum_buffer"], buf[2])
    fl.save_optimizer_state(opt, tmp_path / "again.state", format="rust")
    assert (tmp_path / "again.state").read_bytes() == data
    wrong = torch.optim.RMSprop([{"params": params[:1]}, {"params": params[1:]}], lr=1.0)
    with pytest.raises(fl.CheckpointError, match="another grouping"):
        fl.load_optimizer_state(wrong, tmp_path / "rms.state")
    sgd = ro.sgd_state(0.2, 0.0, [None, torch.randn(2), None])
    (tmp_path / "sgd.state").write_bytes(sgd)
    opt = torch.optim.SGD(params, lr=1.0, momentum=0.9)
    fl.load_optimizer_state(opt, tmp_path / "sgd.state")
    assert opt.param_groups[0]["lr"] == 0.2 and list(opt.state) == [params[1]]


def test_adamw_stream_carries_weight_decay(tmp_path):
    params = _params()
    data = ro.adamw_state(0.125, 0.01, 3, [None] * 3, [None] * 3)
    (tmp_path / "w.state").write_bytes(data)
    opt = torch.optim.AdamW(params, lr=1.0)
    fl.load_optimizer_state(opt, tmp_path / "w.state")
    assert opt.param_groups[0]["weight_decay"] == 0.125 and opt.param_groups[0]["lr"] == 0.01


def test_bad_rust_streams_leave_the_optimizer_untouched(tmp_path):
    params = _params()
    opt = _stepped(torch.optim.Adam(params, lr=0.01), params)
    before = opt.state_dict()
    cases = {
        "count": ro.adam_state(0.1, 1, [None] * 2, [None] * 2),
        "truncated": ro.adam_state(
            0.1, 1, [torch.ones(3, 2)] + [None] * 2, [torch.ones(3, 2)] + [None] * 2
        )[:-20],
        "shape": ro.adam_state(
            0.1, 1, [torch.ones(2, 3)] + [None] * 2, [torch.ones(2, 3)] + [None] * 2
        ),
        "trailing": ro.adam_state(0.1, 1, [None] * 3, [None] * 3) + b"x",
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(fl.CheckpointError):
            fl.load_optimizer_state(opt, tmp_path / name)
        after = opt.state_dict()
        assert after["param_groups"] == before["param_groups"], name
        assert torch.equal(after["state"][0]["exp_avg"], before["state"][0]["exp_avg"]), name
    with pytest.raises(fl.CheckpointError, match="param count mismatch: checkpoint=2"):
        fl.load_optimizer_state(opt, tmp_path / "count")
    with pytest.raises(fl.CheckpointError, match="not verified"):
        fl.load_optimizer_state(opt, tmp_path / "count", require_verified=True)


def test_rust_format_refuses_what_the_original_cannot_hold(tmp_path):
    params = _params()
    for cls in (torch.optim.Adagrad, torch.optim.RAdam, torch.optim.NAdam):
        with pytest.raises(fl.CheckpointError, match=f"{cls.__name__} has no save_state"):
            fl.save_optimizer_state(cls(params), tmp_path / "x", format="rust")
    with pytest.raises(fl.CheckpointError, match="amsgrad"):
        fl.save_optimizer_state(
            torch.optim.Adam(params, amsgrad=True), tmp_path / "x", format="rust"
        )
    with pytest.raises(fl.CheckpointError, match="centered"):
        fl.save_optimizer_state(
            torch.optim.RMSprop(params, centered=True), tmp_path / "x", format="rust"
        )
    groups = torch.optim.SGD(
        [{"params": params[:1], "weight_decay": 0.1}, {"params": params[1:]}], lr=0.1
    )
    with pytest.raises(fl.CheckpointError, match="weight_decay differs"):
        fl.save_optimizer_state(groups, tmp_path / "x", format="rust")
    with pytest.raises(fl.CheckpointError, match="unknown optimizer state format"):
        fl.save_optimizer_state(groups, tmp_path / "x", format="json")
    assert not (tmp_path / "x").exists()
    # the default format still holds all of them
    fl.save_optimizer_state(torch.optim.Adagrad(params), tmp_path / "x")


# ------------------------------------------------------------------------- source config sidecar


def test_sidecar_config_written_and_read_as_the_original_does(tmp_path):
    g, _ = _pair(chain)
    payload = '{"model_type":"bert","hidden_size":768}'
    g.set_source_config(payload)
    g.save_checkpoint(tmp_path / "model.fdl")
    assert (tmp_path / "model.config.json").read_text() == payload
    g.save_checkpoint(tmp_path / "v3.fdl.gz", rust_compatible=True)
    assert (tmp_path / "v3.config.json").read_text() == payload
    assert fl.read_source_config(tmp_path / "v3.fdl.gz") == payload
    assert str(fl.sidecar_config_path("relative/v3.fdl")) == "relative/v3.config.json"
    assert str(fl.sidecar_config_path("/tmp/weights")) == "/tmp/weights.config.json"
    g.clear_source_config()
    assert g.source_config is None
    g.save_checkpoint(tmp_path / "plain.fdl")
    assert not (tmp_path / "plain.config.json").exists()
    assert fl.read_source_config(tmp_path / "plain.fdl") is None
    with pytest.raises(fl.CheckpointError, match="text"):
        g.set_source_config({"model_type": "bert"})


def test_rust_file_of_a_child_loads_into_the_composed_graph(tmp_path):
    torch.manual_seed(0)
    a, b = nn.Linear(4, 6), nn.Linear(6, 6)
    rust_child = ro.RustFlow(ro.Module.of(a)).tag("proj").through(ro.Module.of(b)).build()
    trained = {id(t): torch.randn_like(t) for _, t in rust_child.named_parameters()}
    ro.save_checkpoint_file(
        tmp_path / "child.fdl",
        [(n, trained[id(t)]) for n, t in rust_child.named_parameters()],
        structural_hash=rust_child.structural_hash(),
    )
    child = (
        fl.FlowBuilder(nn.Linear(4, 6)).tag("proj").through(nn.Linear(6, 6)).label("enc").build()
    )
    parent = fl.FlowBuilder(child).through(nn.Linear(6, 2)).build()
    report = parent.load_subgraph_checkpoint("enc", tmp_path / "child.fdl")
    assert report.loaded == [
        "enc.proj.weight",
        "enc.proj.bias",
        "enc.linear_2.weight",
        "enc.linear_2.bias",
    ]
    assert torch.equal(parent.get_parameter("enc.proj.weight"), trained[id(a.weight)])
    assert torch.equal(parent.get_parameter("enc.linear_2.bias"), trained[id(b.bias)])
