"""Unverified files are visible and refusable; name mismatches explain themselves."""

from __future__ import annotations

import struct

import pytest
import torch
from torch import nn

import flodl as fl

PHRASE = "not verified: no integrity trailer"


def cut_at_trailer(path):
    """Drop flodl's trailer: what remains is byte-identical to the original's file."""
    data = path.read_bytes()
    (body_len,) = struct.unpack("<Q", data[-16:-8])
    path.write_bytes(data[:body_len])
    return data


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))


def test_file_cut_at_the_trailer_loads_but_says_it_is_unverified(tmp_path):
    model = _model()
    path = tmp_path / "m.fdl"
    fl.save_checkpoint(path, model.named_parameters(), model.named_buffers())
    assert fl.checkpoint_info(path).verified
    cut_at_trailer(path)
    fl.save_checkpoint(
        tmp_path / "rust.fdl", model.named_parameters(), model.named_buffers(), rust_compatible=True
    )
    assert path.read_bytes() == (tmp_path / "rust.fdl").read_bytes()
    target = _model()
    report = fl.load_checkpoint(path, target.named_parameters(), target.named_buffers())
    assert report.complete and not report.verified
    assert PHRASE in repr(report) and PHRASE in str(report)
    assert fl.checkpoint_info(path).integrity == PHRASE
    verified = fl.load_checkpoint(
        tmp_path / "rust.fdl", target.named_parameters(), target.named_buffers()
    )
    assert "checksums verified" not in repr(verified)


def _untouched(before, model):
    return all(torch.equal(a, b) for a, b in zip(before, model.state_dict().values(), strict=True))


def test_require_verified_refuses_unverified_files_everywhere(tmp_path):
    model = _model()
    for p in model.parameters():
        nn.init.constant_(p, 3.0)
    plain = tmp_path / "m.fdl"
    fl.save_checkpoint(plain, model.named_parameters(), model.named_buffers())
    cut_at_trailer(plain)
    target = _model()
    before = [t.clone() for t in target.state_dict().values()]
    with pytest.raises(fl.CheckpointError, match=PHRASE):
        fl.load_checkpoint(
            plain, target.named_parameters(), target.named_buffers(), require_verified=True
        )
    with pytest.raises(fl.CheckpointError, match=PHRASE):
        fl.read_checkpoint(plain, require_verified=True)
    assert _untouched(before, target)

    graph = fl.FlowBuilder(nn.Linear(3, 4)).tag("a").through(nn.Linear(4, 2)).build()
    graph.save_checkpoint(tmp_path / "g.fdl")
    cut_at_trailer(tmp_path / "g.fdl")
    fresh = fl.FlowBuilder(nn.Linear(3, 4)).tag("a").through(nn.Linear(4, 2)).build()
    before = [t.clone() for t in fresh.state_dict().values()]
    with pytest.raises(fl.CheckpointError, match=PHRASE):
        fresh.load_checkpoint(tmp_path / "g.fdl", require_verified=True)
    assert _untouched(before, fresh)
    assert fresh.load_checkpoint(tmp_path / "g.fdl").loaded  # the default still loads it

    child = fl.FlowBuilder(nn.Linear(3, 4)).label("enc").build()
    child.save_checkpoint(tmp_path / "child.fdl", checksum=False)
    parent = fl.FlowBuilder(fl.FlowBuilder(nn.Linear(3, 4)).label("enc").build()).build()
    with pytest.raises(fl.CheckpointError, match=PHRASE):
        parent.load_subgraph_checkpoint("enc", tmp_path / "child.fdl", require_verified=True)

    opt = torch.optim.SGD(target.parameters(), lr=0.5, momentum=0.9)
    fl.save_training_state(tmp_path / "t.fdl", target, opt, epoch=2)
    cut_at_trailer(tmp_path / "t.fdl")
    opt2 = torch.optim.SGD(target.parameters(), lr=0.1)
    with pytest.raises(fl.CheckpointError, match=PHRASE):
        fl.load_training_state(tmp_path / "t.fdl", target, opt2, require_verified=True)
    assert opt2.param_groups[0]["lr"] == 0.1
    assert fl.load_training_state(tmp_path / "t.fdl", target, opt2).epoch == 2

    fl.save_optimizer_state(opt, tmp_path / "o.fdl", checksum=False)
    with pytest.raises(fl.CheckpointError, match=PHRASE):
        fl.load_optimizer_state(opt2, tmp_path / "o.fdl", require_verified=True)

    with pytest.raises(fl.CheckpointError, match=PHRASE):
        fl.migrate_checkpoint_file(
            plain, tmp_path / "out.fdl", target.named_parameters(), require_verified=True
        )
    assert not (tmp_path / "out.fdl").exists()


def test_require_verified_accepts_checksummed_files(tmp_path):
    model = _model()
    fl.save_checkpoint(tmp_path / "m.fdl.gz", model.named_parameters(), model.named_buffers())
    report = fl.load_checkpoint(
        tmp_path / "m.fdl.gz",
        model.named_parameters(),
        model.named_buffers(),
        require_verified=True,
    )
    assert report.verified and "checksums verified" in repr(report)
    opt = torch.optim.Adam(model.parameters())
    fl.save_optimizer_state(opt, tmp_path / "o.fdl")
    fl.load_optimizer_state(opt, tmp_path / "o.fdl", require_verified=True)


def _graph(tag):
    torch.manual_seed(0)
    return (
        fl.FlowBuilder(nn.Linear(4, 8))
        .tag(tag)
        .through(nn.ReLU())
        .through(nn.Linear(8, 2))
        .tag("head")
        .build()
    )


def test_renamed_tag_mismatch_names_the_entries_and_the_cause(tmp_path):
    old = _graph("hidden")
    old.save_checkpoint(tmp_path / "old.fdl")
    new = _graph("encoder")
    with pytest.raises(fl.CheckpointError) as err:
        new.load_checkpoint(tmp_path / "old.fdl")
    message = str(err.value)
    assert "architecture mismatch" in message
    assert "in the file, not in the model: 'hidden.weight', 'hidden.bias'" in message
    assert "in the model, not in the file: 'encoder.weight', 'encoder.bias'" in message
    assert "renamed tag or label ('hidden' -> 'encoder')" in message
    assert "fl.migrate_checkpoint_file" in message and "strict_hash=False" in message
    # following the advice keeps every weight
    report = fl.migrate_checkpoint_file(
        tmp_path / "old.fdl", tmp_path / "new.fdl", new.named_parameters(), new.named_buffers()
    )
    assert report.is_complete()
    assert new.load_checkpoint(tmp_path / "new.fdl").complete
    assert torch.equal(new.get_parameter("encoder.weight"), old.get_parameter("hidden.weight"))


def test_mismatch_explained_for_streams_and_same_names():
    import io

    old = _graph("hidden")
    buf = io.BytesIO()
    old.save_checkpoint(buf)
    buf.seek(0)
    rewired = (
        fl.FlowBuilder(nn.Linear(4, 8))
        .tag("hidden")
        .through(nn.Tanh())
        .through(nn.Linear(8, 2))
        .tag("head")
        .build()
    )
    with pytest.raises(fl.CheckpointError, match="match by name and shape"):
        rewired.load_checkpoint(buf)


def test_load_that_matches_nothing_is_an_error_naming_both_sides(tmp_path):
    src = nn.Linear(3, 2)
    fl.save_checkpoint(tmp_path / "m.fdl", {f"old/{n}": p for n, p in src.named_parameters()})
    target = nn.Linear(3, 2)
    before = [p.clone() for p in target.parameters()]
    with pytest.raises(fl.CheckpointError) as err:
        fl.load_checkpoint(tmp_path / "m.fdl", target.named_parameters())
    message = str(err.value)
    assert "'old/weight', 'old/bias'" in message and "'weight', 'bias'" in message
    assert "allow_no_match=True" in message and "fl.migrate_checkpoint_file" in message
    assert all(torch.equal(a, b) for a, b in zip(before, target.parameters(), strict=True))
    report = fl.load_checkpoint(tmp_path / "m.fdl", target.named_parameters(), allow_no_match=True)
    assert report.loaded == [] and report.missing == ["weight", "bias"]

    a, b = _graph("hidden"), _graph("other")
    b.save_checkpoint(tmp_path / "b.fdl")
    fl.save_checkpoint(tmp_path / "renamed.fdl", {f"x_{n}": t for n, t in b.state_dict().items()})
    with pytest.raises(fl.CheckpointError, match="no entry of the file matches"):
        a.load_checkpoint(tmp_path / "renamed.fdl", strict_hash=False)
    assert a.load_checkpoint(tmp_path / "renamed.fdl", allow_no_match=True).loaded == []
    # a partial match is not an error: it is reported
    report = a.load_checkpoint(tmp_path / "b.fdl", strict_hash=False)
    assert report.loaded == ["head.weight", "head.bias"] and report.missing


def test_a_shape_only_mismatch_is_still_the_shape_error(tmp_path):
    fl.save_checkpoint(tmp_path / "m.fdl", {"weight": torch.ones(2, 2)})
    with pytest.raises(fl.CheckpointError, match="shape mismatch"):
        fl.load_checkpoint(tmp_path / "m.fdl", {"weight": torch.ones(3, 3)})
    report = fl.load_checkpoint(
        tmp_path / "m.fdl", {"weight": torch.ones(3, 3)}, strict_shapes=False
    )
    assert report.loaded == [] and report.mismatches


def test_training_state_mismatch_explains_the_renamed_tag(tmp_path):
    old = _graph("hidden")
    fl.save_training_state(tmp_path / "t.fdl", old, epoch=1)
    with pytest.raises(fl.CheckpointError) as err:
        fl.load_training_state(tmp_path / "t.fdl", _graph("encoder"))
    assert "renamed tag or label ('hidden' -> 'encoder')" in str(err.value)
    assert "strict_hash=False" in str(err.value)
