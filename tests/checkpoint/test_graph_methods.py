"""Checkpoint methods on real fl.Graph models built with fl.FlowBuilder (test_methods.py covers
the mixin on a plain nn.Module)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import flodl as fl


def encoder(width: int = 8) -> fl.Graph:
    return (
        fl.FlowBuilder(nn.Linear(4, width))
        .through(nn.ReLU())
        .tag("hidden")
        .through(nn.LayerNorm(width))
        .label("encoder")
        .build()
    )


def classifier(seed: int, classes: int = 3, width: int = 8) -> fl.Graph:
    torch.manual_seed(seed)
    return fl.FlowBuilder(encoder(width)).through(nn.Linear(width, classes)).build()


def tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def unchanged(model: nn.Module, before: dict[str, torch.Tensor]) -> bool:
    now = model.state_dict()
    return now.keys() == before.keys() and all(torch.equal(now[k], before[k]) for k in before)


def test_round_trip_on_a_graph(tmp_path):
    model, other = classifier(0), classifier(1)
    model.save_checkpoint(tmp_path / "m.fdl")
    report = other.load_checkpoint(tmp_path / "m.fdl")
    assert report.complete and report.verified
    assert report.loaded == [n for n, _ in model.named_parameters()] + [
        n for n, _ in model.named_buffers()
    ]
    assert unchanged(other, tensors(model))
    assert fl.checkpoint_info(tmp_path / "m.fdl").structural_hash == model.structural_hash()


def test_another_architecture_is_refused_naming_both_hashes_and_changes_nothing(tmp_path):
    saved_from = classifier(0)
    saved_from.save_checkpoint(tmp_path / "m.fdl")
    other = classifier(1, classes=5)
    assert other.structural_hash() != saved_from.structural_hash()
    before = tensors(other)
    with pytest.raises(fl.CheckpointError) as info:
        other.load_checkpoint(tmp_path / "m.fdl")
    message = str(info.value)
    assert "architecture mismatch" in message and "strict_hash=False" in message
    assert f"file={saved_from.structural_hash()}" in message
    assert f"model={other.structural_hash()}" in message
    assert info.value.offset == 8  # where the hash is stored
    assert unchanged(other, before)


def attention(heads: int) -> fl.Graph:
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(8, heads, batch_first=True)
    b = fl.FlowBuilder(nn.Identity()).tag("x").through(mha).using(key="x", value="x")
    return b.through(fl.nn.Select(0)).build()


def test_a_file_from_another_head_count_is_refused(tmp_path):
    # Same parameter names and shapes; only num_heads (absent from MHA's extra_repr) differs,
    # and loading computed different outputs without a word.
    two, four = attention(2), attention(4)
    two.save_checkpoint(tmp_path / "two.fdl")
    before = tensors(four)
    with pytest.raises(fl.CheckpointError, match="different architecture"):
        four.load_checkpoint(tmp_path / "two.fdl")
    assert unchanged(four, before)
    assert attention(2).load_checkpoint(tmp_path / "two.fdl").complete


def test_a_file_saved_before_module_attributes_were_hashed_still_loads(tmp_path):
    from flodl.graph.hashing import structural_hash

    model = attention(2)
    earlier = structural_hash(model, legacy=True)
    assert earlier != model.structural_hash()
    fl.save_checkpoint(
        tmp_path / "old.fdl", model.named_parameters(), model.named_buffers(), earlier
    )
    other = attention(2)
    with torch.no_grad():
        for p in other.parameters():
            p.zero_()
    assert other.load_checkpoint(tmp_path / "old.fdl").complete
    assert unchanged(other, tensors(model))


def test_strict_hash_false_loads_what_matches(tmp_path):
    source = classifier(0)
    source.save_checkpoint(tmp_path / "m.fdl")
    target = classifier(1, classes=5)
    head_before = {n: p.clone() for n, p in target.named_parameters() if n.startswith("linear_")}
    with pytest.raises(fl.CheckpointError, match="shape mismatch: checkpoint=\\[3, 8\\] model"):
        target.load_checkpoint(tmp_path / "m.fdl", strict_hash=False)
    report = target.load_checkpoint(tmp_path / "m.fdl", strict_hash=False, strict_shapes=False)
    assert {m.name for m in report.mismatches} == set(head_before)
    assert all(n.startswith("encoder.") for n in report.loaded) and len(report.loaded) == 4
    for name, param in target.named_parameters():
        expected = head_before[name] if name in head_before else source.get_parameter(name)
        assert torch.equal(param, expected), name


def test_a_pretrained_child_loads_into_the_composed_graph(tmp_path):
    torch.manual_seed(7)
    pretrained = encoder()
    pretrained.save_checkpoint(tmp_path / "encoder.fdl")
    model = classifier(1)
    head = {n: p.clone() for n, p in model.named_parameters() if not n.startswith("encoder.")}
    report = model.load_subgraph_checkpoint("encoder", tmp_path / "encoder.fdl")
    assert report.complete and report.verified
    assert report.loaded == [f"encoder.{n}" for n, _ in pretrained.named_parameters()]
    assert set(report.loaded) <= {n for n, _ in model.named_parameters()}
    assert unchanged(model.subgraph("encoder"), tensors(pretrained))
    assert all(torch.equal(model.get_parameter(n), p) for n, p in head.items())


def test_a_child_of_another_width_is_refused(tmp_path):
    encoder(width=6).save_checkpoint(tmp_path / "encoder.fdl")
    model = classifier(1)
    before = tensors(model)
    with pytest.raises(fl.CheckpointError, match=r"architecture mismatch.*strict_hash=False"):
        model.load_subgraph_checkpoint("encoder", tmp_path / "encoder.fdl")
    assert unchanged(model, before)


@pytest.mark.parametrize(
    ("label", "detail"),
    [("decoder", "closest valid paths: 'encoder'"), ("encoder.hidden", "resolves to a tag")],
)
def test_a_label_naming_no_subgraph_is_a_checkpoint_error(tmp_path, label, detail):
    """Regression: the docstring promised CheckpointError, a real Graph raised PathError."""
    encoder().save_checkpoint(tmp_path / "encoder.fdl")
    model = classifier(1)
    before = tensors(model)
    with pytest.raises(fl.CheckpointError, match=f"no subgraph labelled '{label}'") as info:
        model.load_subgraph_checkpoint(label, tmp_path / "encoder.fdl")
    assert detail in str(info.value) and str(tmp_path / "encoder.fdl") in str(info.value)
    assert isinstance(info.value.__cause__, fl.PathError)
    assert unchanged(model, before)
