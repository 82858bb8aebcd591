"""The Graph-facing mixin, on a small module providing the methods fl.Graph will provide."""

from __future__ import annotations

import hashlib

import pytest
import torch
from torch import nn

import flodl as fl
from flodl.checkpoint.methods import CheckpointMethods


class Block(CheckpointMethods, nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.lin = nn.Linear(width, width)
        self.norm = nn.BatchNorm1d(width)

    def structural_hash(self) -> str:
        shapes = [(n, tuple(p.shape)) for n, p in self.named_parameters()]
        return hashlib.sha256(repr(("Block", shapes)).encode()).hexdigest()


class Composed(CheckpointMethods, nn.Module):
    def __init__(self, width: int = 4, classes: int = 3):
        super().__init__()
        self.encoder = Block(width)
        self.head = nn.Linear(width, classes)

    def structural_hash(self) -> str:
        shapes = [(n, tuple(p.shape)) for n, p in self.named_parameters()]
        return hashlib.sha256(repr(("Composed", shapes)).encode()).hexdigest()

    def subgraph(self, label: str):
        child = getattr(self, label, None)
        return child if isinstance(child, nn.Module) else None


def fresh(seed: int = 1, **kwargs) -> Composed:
    torch.manual_seed(seed)
    return Composed(**kwargs)


def same(a: nn.Module, b: nn.Module) -> bool:
    return all(
        torch.equal(x, y)
        for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


def test_mixin_does_not_shadow_module_methods():
    assert Composed.named_parameters is nn.Module.named_parameters


def test_save_and_load_round_trip(tmp_path):
    model = fresh(0)
    model.encoder.norm.running_var.fill_(3.0)
    model.save_checkpoint(tmp_path / "m.fdl")
    other = fresh(1)
    report = other.load_checkpoint(tmp_path / "m.fdl")
    assert report.complete and report.verified and same(model, other)
    assert fl.checkpoint_info(tmp_path / "m.fdl").structural_hash == model.structural_hash()


def test_other_architecture_is_refused_with_the_opt_out_named(tmp_path):
    fresh(0).save_checkpoint(tmp_path / "m.fdl")
    other = fresh(1, classes=5)
    before = {k: v.clone() for k, v in other.state_dict().items()}
    with pytest.raises(fl.CheckpointError) as info:
        other.load_checkpoint(tmp_path / "m.fdl")
    assert "architecture mismatch" in str(info.value) and "strict_hash=False" in str(info.value)
    assert all(torch.equal(v, before[k]) for k, v in other.state_dict().items())


def test_partial_load_into_another_architecture(tmp_path):
    source = fresh(0)
    source.save_checkpoint(tmp_path / "m.fdl")
    target = fresh(1, classes=5)
    report = target.load_checkpoint(tmp_path / "m.fdl", strict_hash=False, strict_shapes=False)
    assert {m.name for m in report.mismatches} == {"head.weight", "head.bias"}
    assert same(source.encoder, target.encoder)


def test_subgraph_checkpoint_loads_into_the_child_with_prefixed_names(tmp_path):
    pretrained = Block(4)
    pretrained.save_checkpoint(tmp_path / "encoder.fdl")
    model = fresh(1)
    head_before = model.head.weight.clone()
    report = model.load_subgraph_checkpoint("encoder", tmp_path / "encoder.fdl")
    assert report.complete and same(pretrained, model.encoder)
    composed_names = {n for n, _ in model.named_parameters()} | {
        n for n, _ in model.named_buffers()
    }
    assert set(report.loaded) <= composed_names and "encoder.lin.weight" in report.loaded
    assert torch.equal(model.head.weight, head_before)


def test_subgraph_hash_is_checked_against_the_child(tmp_path):
    Block(6).save_checkpoint(tmp_path / "wide.fdl")
    model = fresh(1)
    with pytest.raises(fl.CheckpointError, match=r"architecture mismatch.*strict_hash=False"):
        model.load_subgraph_checkpoint("encoder", tmp_path / "wide.fdl")


def test_unknown_subgraph_label(tmp_path):
    fresh(0).save_checkpoint(tmp_path / "m.fdl")
    with pytest.raises(fl.CheckpointError, match="no subgraph labelled 'decoder'"):
        fresh(1).load_subgraph_checkpoint("decoder", tmp_path / "m.fdl")


def test_training_state_checks_the_structural_hash(tmp_path):
    fl.save_training_state(tmp_path / "run.fdl", fresh(0), epoch=2)
    assert fl.checkpoint_info(tmp_path / "run.fdl").structural_hash == fresh(0).structural_hash()
    other = fresh(1, classes=5)
    with pytest.raises(fl.CheckpointError, match=r"architecture mismatch.*strict_hash=False"):
        fl.load_training_state(tmp_path / "run.fdl", other)
    state = fl.load_training_state(
        tmp_path / "run.fdl", other, strict_hash=False, strict_shapes=False, restore_rng=False
    )
    assert state.epoch == 2 and {m.name for m in state.report.mismatches} == {
        "head.weight",
        "head.bias",
    }
